//! Trace ids: the W3C trace-context id that ties one request or run together across log
//! lines, run records, audit rows and the `X-Trace-Id` response header. An id is taken from
//! a valid incoming `traceparent` header or generated; the id of the work a thread is
//! doing is held in a thread-local scope, so the store can record it on the rows it writes
//! without every call passing it along. No async runtime here: the HTTP layer carries the
//! id across `await`s and enters its scope on the threads that do blocking work.

use std::cell::RefCell;
use std::fmt;

/// A 128-bit trace id as 32 lowercase hex digits, never all zeros.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TraceId(String);

thread_local! {
    static CURRENT: RefCell<Option<TraceId>> = const { RefCell::new(None) };
}

impl TraceId {
    /// A fresh random id.
    pub fn generate() -> Self {
        let value: u128 = rand::random::<u128>().max(1);
        Self(format!("{value:032x}"))
    }

    /// The trace id of a `traceparent` header (`00-<trace id>-<parent id>-<flags>`), or
    /// `None` when the header is not a valid version-00 one (all-zero ids are invalid).
    pub fn from_traceparent(header: &str) -> Option<Self> {
        let mut parts = header.trim().split('-');
        let (version, trace, parent, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let hex = |text: &str, len: usize| {
            text.len() == len
                && text
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        let zero = |text: &str| text.bytes().all(|b| b == b'0');
        let valid = parts.next().is_none()
            && version == "00"
            && hex(trace, 32)
            && !zero(trace)
            && hex(parent, 16)
            && !zero(parent)
            && hex(flags, 2);
        valid.then(|| Self(trace.to_owned()))
    }

    /// A stored id read back (from a run record); `None` unless it has the id's shape.
    pub fn parse(text: &str) -> Option<Self> {
        let shaped = text.len() == 32
            && text
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            && !text.bytes().all(|b| b == b'0');
        shaped.then(|| Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Runs `work` with `id` as this thread's current trace id (restoring the previous one
/// afterwards, even if `work` panics).
pub fn with_trace_id<T>(id: Option<TraceId>, work: impl FnOnce() -> T) -> T {
    struct Restore(Option<TraceId>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            CURRENT.with(|current| *current.borrow_mut() = previous);
        }
    }
    let previous = CURRENT.with(|current| current.replace(id));
    let _restore = Restore(previous);
    work()
}

/// The trace id of the work this thread is doing, if any.
pub fn current_trace_id() -> Option<String> {
    CURRENT.with(|current| current.borrow().as_ref().map(|id| id.0.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_headers_are_validated() {
        let id =
            TraceId::from_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
                .expect("a valid header");
        assert_eq!(id.as_str(), "4bf92f3577b34da6a3ce929d0e0e4736");
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x",
        ] {
            assert_eq!(TraceId::from_traceparent(bad), None, "{bad}");
        }
    }

    #[test]
    fn generated_ids_are_valid_and_scopes_nest() {
        let id = TraceId::generate();
        assert_eq!(TraceId::parse(id.as_str()), Some(id.clone()));
        assert_eq!(current_trace_id(), None);
        with_trace_id(Some(id.clone()), || {
            assert_eq!(current_trace_id().as_deref(), Some(id.as_str()));
            with_trace_id(None, || assert_eq!(current_trace_id(), None));
            assert_eq!(current_trace_id().as_deref(), Some(id.as_str()));
        });
        assert_eq!(current_trace_id(), None);
    }
}
