//! Durability for `--data-dir`: an append-only log of every acknowledged change.
//!
//! Each change is written (one `write` call of a whole JSON line) before the client is
//! answered, so a `kill -9` loses nothing acknowledged: the bytes are in the kernel's
//! page cache. At start the log is replayed (a torn last line from a crash mid-write is
//! ignored) and then rewritten compactly as a snapshot of the current state.
//!
//! The JSON a client sent (documents, database and container resources) is kept in a
//! record as JSON *text*, not nested inside it: a value at the deepest nesting the request
//! parser accepts would otherwise sit one level deeper in its record than the same parser
//! reads back, and an acknowledged write would fail the next start.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Record {
    CreateDatabase {
        #[serde(with = "json_text")]
        resource: Value,
    },
    DeleteDatabase {
        id: String,
    },
    CreateContainer {
        database: String,
        #[serde(with = "json_text")]
        resource: Value,
        partitions: usize,
    },
    DeleteContainer {
        database: String,
        id: String,
    },
    /// Dedicated throughput of a container, or shared throughput of a database.
    SetThroughput {
        database: String,
        container: Option<String>,
        ru_per_second: f64,
    },
    PutDocument {
        database: String,
        container: String,
        #[serde(with = "json_text")]
        document: Value,
    },
    DeleteDocument {
        database: String,
        container: String,
        partition_key: String,
        id: String,
    },
}

const LOG_FILE: &str = "emulator.log";

#[derive(Debug)]
pub struct Wal {
    dir: PathBuf,
    file: Mutex<File>,
}

#[derive(Debug, thiserror::Error)]
pub enum WalError {
    #[error("data directory {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("data file {path} is corrupt at line {line}: {detail}")]
    Corrupt {
        path: PathBuf,
        line: usize,
        detail: String,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> WalError + '_ {
    move |source| WalError::Io {
        path: path.to_owned(),
        source,
    }
}

impl Wal {
    /// Reads every record in `dir`'s log (creating the directory if needed).
    pub fn load(dir: &Path) -> Result<Vec<Record>, WalError> {
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        let path = dir.join(LOG_FILE);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_err(&path)(e)),
        };
        let mut records = Vec::new();
        let mut lines = BufReader::new(file).lines().enumerate().peekable();
        while let Some((n, line)) = lines.next() {
            let line = line.map_err(io_err(&path))?;
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Record>(&line) {
                Ok(record) => records.push(record),
                // Only the last line can be torn by a crash; anything earlier is real damage.
                Err(_) if lines.peek().is_none() => {
                    tracing::warn!(line = n + 1, "ignoring a torn last record in the data log");
                }
                Err(e) => {
                    return Err(WalError::Corrupt {
                        path,
                        line: n + 1,
                        detail: e.to_string(),
                    })
                }
            }
        }
        Ok(records)
    }

    /// Replaces the log with `snapshot` (atomically, via rename) and opens it for appends.
    pub fn rewrite(dir: &Path, snapshot: &[Record]) -> Result<Self, WalError> {
        let path = dir.join(LOG_FILE);
        let tmp = dir.join(format!("{LOG_FILE}.tmp"));
        {
            let mut out = std::io::BufWriter::new(File::create(&tmp).map_err(io_err(&tmp))?);
            for record in snapshot {
                let line = serde_json::to_string(record).map_err(|e| WalError::Corrupt {
                    path: tmp.clone(),
                    line: 0,
                    detail: e.to_string(),
                })?;
                out.write_all(line.as_bytes()).map_err(io_err(&tmp))?;
                out.write_all(b"\n").map_err(io_err(&tmp))?;
            }
            let file = out.into_inner().map_err(|e| io_err(&tmp)(e.into_error()))?;
            file.sync_all().map_err(io_err(&tmp))?;
        }
        std::fs::rename(&tmp, &path).map_err(io_err(&path))?;
        let file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(io_err(&path))?;
        Ok(Self {
            dir: dir.to_owned(),
            file: Mutex::new(file),
        })
    }

    /// Appends one record with a single write, before the change is acknowledged.
    pub fn append(&self, record: &Record) -> Result<(), WalError> {
        let mut line = serde_json::to_vec(record).map_err(|e| WalError::Corrupt {
            path: self.dir.join(LOG_FILE),
            line: 0,
            detail: e.to_string(),
        })?;
        line.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        file.write_all(&line).map_err(io_err(&self.dir))
    }
}

/// A JSON value stored as the text of its JSON, read back with the same parser (and so
/// the same nesting limit) that accepted it from the client. Logs written before this
/// stored the value inline; those still read.
mod json_text {
    use serde::{Deserialize, Deserializer, Serializer};
    use serde_json::Value;

    pub fn serialize<S: Serializer>(value: &Value, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&value.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        match Value::deserialize(d)? {
            Value::String(text) => serde_json::from_str(&text).map_err(serde::de::Error::custom),
            inline => Ok(inline),
        }
    }
}
