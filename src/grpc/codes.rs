//! What each outcome is in gRPC's status codes, written once without I/O: which of a method's
//! codes are stored as a key's outcome, and which code answers each refusal of the layer (the
//! HTTP layer's problem codes). Invariant: a code that says the call may succeed if simply tried
//! again (the server or the network failed, not the request) is never stored, so a retry runs
//! the method again; every refusal has exactly one code, and none of them is `OK`.

use tonic::Code;

/// Whether a method's answer with `code` is stored and replayed to every retry of its key (the
/// default rule): `OK` and the codes that say the request itself is final (`INVALID_ARGUMENT`,
/// `NOT_FOUND`, `ALREADY_EXISTS`, `PERMISSION_DENIED`, `FAILED_PRECONDITION`, `OUT_OF_RANGE`,
/// `UNIMPLEMENTED`, `UNAUTHENTICATED`); the others (`CANCELLED`, `UNKNOWN`, `DEADLINE_EXCEEDED`,
/// `RESOURCE_EXHAUSTED`, `ABORTED`, `INTERNAL`, `UNAVAILABLE`, `DATA_LOSS`) release the key, as a
/// 5xx does in the HTTP layer.
pub(crate) fn stored_by_default(code: Code) -> bool {
    matches!(
        code,
        Code::Ok
            | Code::InvalidArgument
            | Code::NotFound
            | Code::AlreadyExists
            | Code::PermissionDenied
            | Code::FailedPrecondition
            | Code::OutOfRange
            | Code::Unimplemented
            | Code::Unauthenticated
    )
}

/// The status a refusal of the layer answers with, by the HTTP layer's problem code (see the
/// table in the module's documentation). An unknown code is `INTERNAL`.
pub(crate) fn refusal(problem: &str) -> Code {
    match problem {
        "idempotency-key-missing" | "idempotency-key-invalid" | "request-body-unreadable" => {
            Code::InvalidArgument
        }
        "principal-missing" => Code::Unauthenticated,
        "request-too-large" => Code::ResourceExhausted,
        "idempotency-key-reused" => Code::FailedPrecondition,
        "idempotency-key-in-progress" => Code::Aborted,
        "idempotency-store-busy" | "idempotency-store-unavailable" => Code::Unavailable,
        _ => Code::Internal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table of the module's documentation, row by row.
    #[test]
    fn refusals_map_as_documented() {
        for (problem, code) in [
            ("idempotency-key-missing", Code::InvalidArgument),
            ("idempotency-key-invalid", Code::InvalidArgument),
            ("request-body-unreadable", Code::InvalidArgument),
            ("principal-missing", Code::Unauthenticated),
            ("request-too-large", Code::ResourceExhausted),
            ("idempotency-key-reused", Code::FailedPrecondition),
            ("idempotency-key-in-progress", Code::Aborted),
            ("idempotency-store-busy", Code::Unavailable),
            ("idempotency-store-unavailable", Code::Unavailable),
            ("idempotency-store-failed", Code::Internal),
            ("principal-unstorable", Code::Internal),
            ("handler-panicked", Code::Internal),
        ] {
            assert_eq!(refusal(problem), code, "{problem}");
        }
    }

    #[test]
    fn only_final_codes_are_stored() {
        let stored: Vec<i32> = (0..=16)
            .filter(|c| stored_by_default(Code::from_i32(*c)))
            .collect();
        assert_eq!(stored, vec![0, 3, 5, 6, 7, 9, 11, 12, 16]);
    }
}
