//! A span context as W3C Trace Context text, written without the formatting machinery:
//! the `traceparent` a backend call carries, the `traceresponse` and ids an answer
//! carries, and the ids of a request's log lines.

use opentelemetry::trace::{SpanContext, TraceFlags};

/// A span context in the W3C Trace Context form,
/// `00-{trace id}-{parent id}-{flags}` in lowercase hex (`traceparent`, and
/// `traceresponse` on the way back); only the sampled flag is carried.
#[derive(Clone, Copy)]
pub(crate) struct W3cTraceparent([u8; 55]);

impl W3cTraceparent {
    pub(crate) fn of(context: &SpanContext) -> Self {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut text = [b'-'; 55];
        let flags = context.trace_flags() & TraceFlags::SAMPLED;
        let fields = [
            (0, &[0u8][..]),
            (3, &context.trace_id().to_bytes()[..]),
            (36, &context.span_id().to_bytes()[..]),
            (53, &[flags.to_u8()][..]),
        ];
        for (start, bytes) in fields {
            for (i, byte) in bytes.iter().enumerate() {
                text[start + 2 * i] = HEX[usize::from(byte >> 4)];
                text[start + 2 * i + 1] = HEX[usize::from(byte & 0xf)];
            }
        }
        Self(text)
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The 32 hex digits of the trace id.
    pub(crate) fn trace_id(&self) -> &str {
        self.hex(3..35)
    }

    /// The 16 hex digits of the span id.
    pub(crate) fn span_id(&self) -> &str {
        self.hex(36..52)
    }

    fn hex(&self, range: std::ops::Range<usize>) -> &str {
        // Only ASCII hex digits and dashes are ever written.
        std::str::from_utf8(&self.0[range]).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanId, TraceId, TraceState};

    #[test]
    fn the_ids_are_the_traceparents_own_digits() {
        let context = SpanContext::new(
            TraceId::from(0xabc),
            SpanId::from(0x12),
            TraceFlags::SAMPLED,
            false,
            TraceState::NONE,
        );
        let ids = W3cTraceparent::of(&context);
        assert_eq!(ids.trace_id(), "00000000000000000000000000000abc");
        assert_eq!(ids.span_id(), "0000000000000012");
        assert_eq!(
            ids.as_bytes(),
            b"00-00000000000000000000000000000abc-0000000000000012-01"
        );
    }
}
