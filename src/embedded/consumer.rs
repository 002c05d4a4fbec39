//! Idempotent event consumers on the embedded store: message deduplication per consumer group.
//! Invariant: a message is a record in the consumer namespace of the records column family, keyed
//! by (group, message id), so it has exactly the request lifecycle (leases, fencing, takeover,
//! expiry); a message that has been attempted `max_attempts` times is stored as a terminal
//! "poisoned" failure and never handed out again until it expires.

use std::borrow::Borrow;

use crate::consumer::{
    begin_step, claim_options, message_failure, poison_marker, Begin, BeginStep, ConsumerOptions,
    MessageFailed,
};
use crate::embedded::Store;
use crate::error::Result;
use crate::record::{FailKind, Lease};

impl Store {
    /// A delivery of `message_id` to consumer `group`. Groups are independent namespaces, and no
    /// group collides with a request tenant of the same name.
    pub fn begin(
        &self,
        group: impl AsRef<[u8]>,
        message_id: impl AsRef<[u8]>,
        opts: impl Borrow<ConsumerOptions>,
    ) -> Result<Begin> {
        let opts = opts.borrow();
        let (group, id) = (group.as_ref(), message_id.as_ref());
        self.core.check_names(group, id)?;
        let claim = self.claim_in(
            crate::format::Namespace::Consumers,
            group,
            id,
            &[],
            claim_options(opts),
        )?;
        Ok(match begin_step(claim, opts) {
            BeginStep::Answer(b) => b,
            BeginStep::Poison { lease, attempts } => {
                match self.fail(&lease, FailKind::Terminal(poison_marker(attempts)))? {
                    Ok(()) | Err(_) => Begin::Poisoned { attempts },
                }
            }
        })
    }

    /// Records a failed processing attempt: releases the message for redelivery, or poisons it
    /// once `max_attempts` attempts were made.
    pub fn fail_message(
        &self,
        lease: &Lease,
        opts: impl Borrow<ConsumerOptions>,
    ) -> Result<crate::record::LeaseResult<MessageFailed>> {
        let (kind, outcome) = message_failure(lease, opts.borrow());
        Ok(self.fail(lease, kind)?.map(|()| outcome))
    }
}
