//! How the controller's message id travels inside the client id a provider
//! sees, and back.
//!
//! - Codex and ACP get the controller's id as is, and `<id>#continuation` for
//!   the continuation of an interrupted turn ([`continuation_of`]).
//! - OpenCode needs time-ordered message ids (`msg_<16 hex>…`), so the runner
//!   sends `msg_<16 hex>_<id>`, with `__continuation` appended for a
//!   continuation ([`encode_opencode`]).
//!
//! The fakes' scripts key turns by the embedded id ([`opencode_tail`]); the
//! harness's evidence maps every client id back to the controller's form
//! ([`controller_id`]).

/// Appended to the controller's id for a continuation (Codex, ACP, evidence).
pub const CONTINUATION: &str = "#continuation";

/// Appended to the embedded id of an OpenCode continuation.
pub const OPENCODE_CONTINUATION: &str = "__continuation";

/// The client id of the continuation of `message_id` (Codex, ACP).
pub fn continuation_of(message_id: &str) -> String {
    format!("{message_id}{CONTINUATION}")
}

/// The OpenCode client id with time-ordering value `hex` for `message_id`.
pub fn encode_opencode(hex: u64, message_id: &str, continuation: bool) -> String {
    let suffix = if continuation {
        OPENCODE_CONTINUATION
    } else {
        ""
    };
    format!("msg_{hex:016x}_{message_id}{suffix}")
}

/// The time-ordering value of any `msg_<16 hex>…` id (the runner's, or one
/// OpenCode made itself), if it has one.
pub fn opencode_hex(id: &str) -> Option<u64> {
    let hex = id.strip_prefix("msg_")?.get(..16)?;
    u64::from_str_radix(hex, 16).ok()
}

/// What follows `msg_<16 hex>_` in a runner-encoded OpenCode id (the
/// embedded id with its continuation suffix), or `None` for any other id.
pub fn opencode_tail(id: &str) -> Option<&str> {
    let rest = id.strip_prefix("msg_")?;
    let (hex, tail) = rest.split_at_checked(16)?;
    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    tail.strip_prefix('_')
}

/// The controller's message id inside any client id: the embedded id of a
/// runner-encoded OpenCode id (a continuation as `<id>#continuation`), else
/// the id itself.
pub fn controller_id(client_id: &str) -> String {
    match opencode_tail(client_id) {
        Some(tail) => match tail.strip_suffix(OPENCODE_CONTINUATION) {
            Some(base) => continuation_of(base),
            None => tail.to_owned(),
        },
        None => client_id.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opencode_ids_round_trip_to_the_controllers_form() {
        let plain = encode_opencode(0x0019_f2a3_b4c5_d6e7, "m-1", false);
        assert_eq!(plain, "msg_0019f2a3b4c5d6e7_m-1");
        assert_eq!(opencode_hex(&plain), Some(0x0019_f2a3_b4c5_d6e7));
        assert_eq!(opencode_tail(&plain), Some("m-1"));
        assert_eq!(controller_id(&plain), "m-1");

        let cont = encode_opencode(7, "m-1", true);
        assert_eq!(opencode_tail(&cont), Some("m-1__continuation"));
        assert_eq!(controller_id(&cont), "m-1#continuation");
        assert_eq!(controller_id(&continuation_of("m1")), "m1#continuation");
    }

    #[test]
    fn other_ids_are_left_as_they_are() {
        for id in [
            "m1",
            "msg_abc",
            "msg_0019f2a3b4c5d6eZ_x",
            "msg_0019f2a3b4c5d6e7x",
        ] {
            assert_eq!(opencode_tail(id), None, "{id}");
            assert_eq!(controller_id(id), id);
        }
        assert_eq!(opencode_hex("msg_nothex"), None);
        assert_eq!(
            opencode_hex("msg_7fffffffffffff00_x"),
            Some(0x7fff_ffff_ffff_ff00)
        );
    }
}
