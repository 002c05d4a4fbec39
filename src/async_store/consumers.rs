//! Idempotent consumers through the async API. Invariant: a delivery is a claim in the consumer
//! namespace on either backend (on PostgreSQL, rows of `idemdb_requests` with `ns = 1`), and what
//! it means (process, duplicate, in progress, poisoned) is decided by the same code as the
//! embedded store's [`Store::begin`](crate::Store::begin); a delivery acquired for a caller that
//! went away is released, as a claim's is.

use std::borrow::Borrow;

use super::{dispatch, AsyncStore, LeaseResult, NO_RELEASE_REPORT};
use crate::consumer::{
    begin_step, claim_options, message_failure, poison_marker, Begin, BeginStep, ConsumerOptions,
    MessageFailed,
};
use crate::error::Result;
use crate::format::Namespace;
use crate::record::{FailKind, Lease};

impl AsyncStore {
    /// A delivery of `message_id` to consumer `group`, as [`Store::begin`](crate::Store::begin):
    /// process it (then [`AsyncStore::complete`] or [`AsyncStore::fail_message`]), or it is a
    /// duplicate, in progress elsewhere, or poisoned. Groups are independent namespaces, and no
    /// group collides with a request tenant of the same name. Each delivery's attempt is durable
    /// from the claim on (poison detection counts the attempts of workers that crashed).
    pub async fn begin(
        &self,
        group: impl AsRef<[u8]>,
        message_id: impl AsRef<[u8]>,
        opts: impl Borrow<ConsumerOptions>,
    ) -> Result<Begin> {
        let opts = *opts.borrow();
        let (group, id) = (group.as_ref(), message_id.as_ref());
        self.common().check_names(group, id)?;
        let claim = self
            .claim_with(
                Namespace::Consumers,
                group,
                id,
                &[],
                claim_options(&opts),
                &NO_RELEASE_REPORT,
            )
            .await?;
        Ok(match begin_step(claim, &opts) {
            BeginStep::Answer(b) => b,
            BeginStep::Poison { lease, attempts } => {
                let poison = FailKind::Terminal(poison_marker(attempts));
                match self.fail(&lease, poison).await? {
                    Ok(()) | Err(_) => Begin::Poisoned { attempts },
                }
            }
        })
    }

    /// Records a failed processing attempt, as [`Store::fail_message`](crate::Store::fail_message):
    /// releases the message for redelivery, or poisons it once `max_attempts` attempts were made.
    pub async fn fail_message(
        &self,
        lease: &Lease,
        opts: impl Borrow<ConsumerOptions>,
    ) -> Result<LeaseResult<MessageFailed>> {
        let (kind, outcome) = message_failure(lease, opts.borrow());
        Ok(self.fail(lease, kind).await?.map(|()| outcome))
    }

    /// Deletes the record of a consumer message whatever its state, as
    /// [`Store::forget_message`](crate::Store::forget_message): a poisoned message gets its
    /// attempts back, a processed one is processed again if delivered again. Whether anything
    /// was stored for it.
    pub async fn forget_message(
        &self,
        group: impl AsRef<[u8]>,
        message_id: impl AsRef<[u8]>,
    ) -> Result<bool> {
        let (group, id) = (group.as_ref(), message_id.as_ref());
        dispatch!(&self.backend, forget(Namespace::Consumers, group, id).await)
    }
}
