//! Where each [`Fault`] applies (`applies_at`, `power_cut_planned_at`),
//! and the error-answer faults' side of it: which model API failure each
//! one injects (`wire::upstream`, where their names and wire forms are
//! defined once) and where a process can answer with it.

use super::{Fault, FaultClass, READ_POINTS, Role, WRITE_POINTS};

impl Fault {
    /// The model API's failure this fault injects, one of
    /// `wire::upstream::UpstreamFault` (the one definition of their names
    /// and wire forms).
    pub fn upstream(self) -> Option<wire::upstream::UpstreamFault> {
        use wire::upstream::UpstreamFault as U;
        Some(match self {
            Fault::RateLimit => U::RateLimit,
            Fault::ServerError => U::ServerError,
            Fault::Unavailable => U::Unavailable,
            Fault::Overload => U::Overload,
            Fault::AuthExpired => U::AuthExpired,
            Fault::ContextOverflow => U::ContextOverflow,
            Fault::StreamCut => U::StreamCut,
            Fault::StreamTruncated => U::StreamTruncated,
            Fault::MalformedEvent => U::MalformedEvent,
            _ => return None,
        })
    }

    /// Whether an error-answer fault can be injected at `point`:
    /// `error-answer` at a provider's request (`ERROR_ANSWER_POINTS`), a
    /// status fault at the model API's request, a stream fault after an
    /// event of its stream but the last; any upstream fault where a fake
    /// provider asks its scripted model (`PROVIDER_MODEL_POINTS`), which
    /// fails the turn as its real product reports that failure.
    pub(super) fn answers_at(self, point: &str) -> bool {
        use wire::upstream as up;
        match self.upstream() {
            None => self == Fault::ErrorAnswer && up::ERROR_ANSWER_POINTS.contains(&point),
            Some(_) if up::PROVIDER_MODEL_POINTS.contains(&point) => true,
            Some(u) if u.is_stream() => up::stream_fault_point(point),
            Some(_) => up::MODEL_REQUEST_POINTS.contains(&point),
        }
    }

    /// Whether the fault may be applied at `point`: a write fault only at a
    /// before-write point and a read fault only at a before-read point; at
    /// either kind of point only its storage faults, `kill-runner` and
    /// `power-cut` (the runner's store is blocked there, so nothing can read
    /// the run log to find the provider, and a controller request would
    /// wait on the held store; a power cut finds the cell's processes by its
    /// tag, not through the runner). An error answer applies only where its
    /// process answers a request (`answers_at`).
    pub fn applies_at(self, point: &str) -> bool {
        let write = point.starts_with(WRITE_POINTS);
        let read = point.starts_with(READ_POINTS);
        if self.class() == FaultClass::Answer {
            return self.answers_at(point);
        }
        if self.is_storage() {
            if self.is_read() { read } else { write }
        } else {
            !(write || read) || matches!(self, Fault::KillRunner | Fault::PowerCut)
        }
    }

    /// Whether the default wave plans a `power-cut` cell at `point` of
    /// `role`: after each of the runner's durable writes
    /// (`runner.<write>.persisted`), and at a provider's boundaries right
    /// after the runner sent it something (`<proto>.<what>.received`, a
    /// request or an answer; `<proto>.<what>.answered`, the runner's answer
    /// to a client request). Those are the moments a runner's claim
    /// (durable, then sent) or a provider's unsynced record is exposed.
    pub fn power_cut_planned_at(point: &str, role: Role) -> bool {
        match role {
            Role::Runner => point.starts_with("runner.") && point.ends_with(".persisted"),
            _ => point.ends_with(".received") || point.ends_with(".answered"),
        }
    }
}
