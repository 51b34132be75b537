//! The trace viewer's gRPC framing: any body is one well-formed unary frame (flag 0 or
//! 1, a length that matches, at most the request limit) or refused, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use trace_viewer::otlp::{grpc_message, MAX_REQUEST_BYTES};

fuzz_target!(|body: &[u8]| {
    let body = axum::body::Bytes::copy_from_slice(body);
    if let Ok((compressed, message)) = grpc_message(&body) {
        assert_eq!(compressed, body[0] == 1);
        assert!(body[0] <= 1, "flag {}", body[0]);
        assert_eq!(message.len() + 5, body.len());
        assert!(message.len() <= MAX_REQUEST_BYTES);
    }
});
