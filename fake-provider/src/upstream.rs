//! Upstream faults of a fake model API: what a real model service does to a
//! client besides answering (a 429 with `retry-after`, a 5xx, a 401 or 400,
//! a stream cut after N events, a malformed event), defined once for every
//! wire format the fake serves. A fault is armed on the command line
//! (`--upstream-fault SPEC`, repeatable) for the n-th request of the process;
//! each API renders it in its own error body (`Render`) and its stream writer
//! asks [`Armed::stream_fault`] what to do with each event.
//!
//! Spec: `KIND@N`, where N is the 1-based request number of this process and
//! KIND is `429` (optionally `429:retry-after=S`), `500`, `503`, `529`,
//! `401`, `400`, `cut:K` (the stream ends after K events, no terminal
//! event), or `malformed:K` (event K's data is not JSON). A request with no
//! armed fault is answered normally.
//!
//! Deliberately not modelled: latency faults (a hang is `--hang POINT`),
//! faults chosen by content, and the services' own retry budgets.

use std::sync::atomic::{AtomicU32, Ordering};

/// One upstream fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upstream {
    /// An HTTP error status before any event (429 with its `retry-after`).
    Status {
        code: u16,
        retry_after_s: Option<u32>,
    },
    /// The stream ends after this many events, without its terminal event.
    CutAfter(usize),
    /// This event (1-based) is sent with data that is not JSON.
    Malformed(usize),
}

/// What a stream writer does with its next event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamFault {
    /// Send it.
    Send,
    /// Send it with malformed data.
    Malform,
    /// Send nothing more: the connection ends here.
    Cut,
}

/// How an API names a status fault in its own error body.
pub trait Render {
    /// The error body of status `code`.
    fn error_body(code: u16, message: &str) -> serde_json::Value;
}

/// The faults armed for this process, and the count of requests so far.
#[derive(Debug, Default)]
pub struct Armed {
    faults: Vec<(u32, Upstream)>,
    requests: AtomicU32,
}

impl Armed {
    /// Parses `--upstream-fault` specs; the error names the spec and the fix.
    pub fn parse(specs: &[String]) -> Result<Armed, String> {
        let mut faults = Vec::new();
        for spec in specs {
            faults.push(parse_one(spec).map_err(|why| {
                format!("--upstream-fault {spec}: {why} (expected KIND@N, KIND one of 429[:retry-after=S], 500, 503, 529, 401, 400, cut:K, malformed:K)")
            })?);
        }
        Ok(Armed {
            faults,
            requests: AtomicU32::new(0),
        })
    }

    /// Counts a request and returns the fault armed for it, if any.
    pub fn next_request(&self) -> Option<Upstream> {
        let n = self.requests.fetch_add(1, Ordering::SeqCst) + 1;
        self.faults.iter().find(|(at, _)| *at == n).map(|(_, f)| *f)
    }
}

impl Upstream {
    /// What to do with event `index` (0-based) of a stream under this fault.
    pub fn stream_fault(fault: Option<Upstream>, index: usize) -> StreamFault {
        match fault {
            Some(Upstream::CutAfter(k)) if index >= k => StreamFault::Cut,
            Some(Upstream::Malformed(k)) if index + 1 == k => StreamFault::Malform,
            _ => StreamFault::Send,
        }
    }
}

fn parse_one(spec: &str) -> Result<(u32, Upstream), String> {
    let (kind, at) = spec.rsplit_once('@').ok_or("no @N")?;
    let at: u32 = at
        .parse()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or("N must be a request number from 1")?;
    let count = |v: &str| {
        v.parse::<usize>()
            .ok()
            .filter(|k| *k >= 1)
            .ok_or("K must be a number from 1")
    };
    let fault = match kind.split_once(':') {
        Some(("cut", k)) => Upstream::CutAfter(count(k)?),
        Some(("malformed", k)) => Upstream::Malformed(count(k)?),
        Some(("429", rest)) => {
            let s = rest
                .strip_prefix("retry-after=")
                .and_then(|s| s.parse().ok())
                .ok_or("429 takes retry-after=S")?;
            Upstream::Status {
                code: 429,
                retry_after_s: Some(s),
            }
        }
        None if ["429", "500", "503", "529", "401", "400"].contains(&kind) => Upstream::Status {
            code: kind.parse().map_err(|_| "bad status")?,
            retry_after_s: None,
        },
        _ => return Err(format!("unknown kind {kind}")),
    };
    Ok((at, fault))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(spec: &str) -> Result<(u32, Upstream), String> {
        parse_one(spec)
    }

    #[test]
    fn specs_parse_to_their_faults() {
        assert_eq!(
            check("429:retry-after=2@1"),
            Ok((
                1,
                Upstream::Status {
                    code: 429,
                    retry_after_s: Some(2)
                }
            ))
        );
        assert_eq!(
            check("529@3"),
            Ok((
                3,
                Upstream::Status {
                    code: 529,
                    retry_after_s: None
                }
            ))
        );
        assert_eq!(check("cut:4@2"), Ok((2, Upstream::CutAfter(4))));
        assert_eq!(check("malformed:1@1"), Ok((1, Upstream::Malformed(1))));
        assert!(check("418@1").is_err());
        assert!(check("500@0").is_err());
        assert!(check("cut:0@1").is_err());
        assert!(check("500").is_err());
        assert!(
            Armed::parse(&["nope".into()])
                .unwrap_err()
                .contains("--upstream-fault nope")
        );
    }

    #[test]
    fn a_fault_hits_its_request_only() {
        let armed = Armed::parse(&["503@2".into()]).unwrap();
        assert_eq!(armed.next_request(), None);
        assert_eq!(
            armed.next_request(),
            Some(Upstream::Status {
                code: 503,
                retry_after_s: None
            })
        );
        assert_eq!(armed.next_request(), None);
    }

    #[test]
    fn a_stream_is_cut_or_malformed_where_armed() {
        let cut = Some(Upstream::CutAfter(2));
        let seen: Vec<_> = (0..3).map(|i| Upstream::stream_fault(cut, i)).collect();
        assert_eq!(
            seen,
            [StreamFault::Send, StreamFault::Send, StreamFault::Cut]
        );
        let bad = Some(Upstream::Malformed(2));
        assert_eq!(Upstream::stream_fault(bad, 1), StreamFault::Malform);
        assert_eq!(Upstream::stream_fault(bad, 0), StreamFault::Send);
        assert_eq!(Upstream::stream_fault(None, 9), StreamFault::Send);
    }
}
