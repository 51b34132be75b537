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
        let mut text = [b'-'; 55];
        text[..2].copy_from_slice(b"00");
        let trace = u128::from_be_bytes(context.trace_id().to_bytes());
        let span = u64::from_be_bytes(context.span_id().to_bytes());
        let words = [
            (trace >> 96) as u32,
            (trace >> 64) as u32,
            (trace >> 32) as u32,
            trace as u32,
        ];
        for (i, word) in words.into_iter().enumerate() {
            text[3 + 8 * i..11 + 8 * i].copy_from_slice(&hex8(word));
        }
        text[36..44].copy_from_slice(&hex8((span >> 32) as u32));
        text[44..52].copy_from_slice(&hex8(span as u32));
        let flags = (context.trace_flags() & TraceFlags::SAMPLED).to_u8();
        text[53..55].copy_from_slice(&hex8(u32::from(flags))[6..]);
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

/// The eight lowercase hex digits of `word`, eight at a time rather than one by one
/// through a table (a traceparent's 50 digits: ~250 instructions that way, ~70 this).
fn hex8(word: u32) -> [u8; 8] {
    // Each nibble into a byte of its own, the most significant first.
    let mut x = u64::from(word);
    x = (x | x << 16) & 0x0000_ffff_0000_ffff;
    x = (x | x << 8) & 0x00ff_00ff_00ff_00ff;
    x = (x | x << 4) & 0x0f0f_0f0f_0f0f_0f0f;
    // A nibble of 10 to 15 carries into its byte's fifth bit when 6 is added: those
    // bytes are the letters, moved from past '9' up to 'a'.
    let letters = ((x + 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101;
    (x + 0x3030_3030_3030_3030 + letters * 0x27).to_be_bytes()
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

    #[test]
    fn every_digit_is_the_formatters() {
        let mut value: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..1_000 {
            // Values spread over the whole range (a Weyl sequence), and the edges.
            value = value.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let (trace, span) = (u128::from(value) << 64 | u128::from(!value), value >> 3);
            for (trace, span, flags) in [
                (trace, span, TraceFlags::SAMPLED),
                (u128::MAX, u64::MAX, TraceFlags::new(0xff)),
                (1, 1, TraceFlags::default()),
            ] {
                let context = SpanContext::new(
                    TraceId::from(trace),
                    SpanId::from(span),
                    flags,
                    false,
                    TraceState::NONE,
                );
                let expected = format!(
                    "00-{trace:032x}-{span:016x}-{:02x}",
                    (flags & TraceFlags::SAMPLED).to_u8()
                );
                assert_eq!(W3cTraceparent::of(&context).as_bytes(), expected.as_bytes());
            }
        }
    }
}
