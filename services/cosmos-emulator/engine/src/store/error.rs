//! What can go wrong in the store, in the store's own terms; the API layer maps each
//! kind to its HTTP status (`ApiError` in the error module).

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The resource or document is malformed (a missing id, a bad partition key...).
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    /// The id is taken.
    #[error("{0}")]
    Conflict(String),
    /// A document beyond Cosmos DB's 2 MB limit.
    #[error("{0}")]
    TooLarge(String),
    /// The write-ahead log could not record the change (it was not applied).
    #[error("could not persist the change: {0}")]
    Persist(String),
}

pub type StoreResult<T> = Result<T, StoreError>;
