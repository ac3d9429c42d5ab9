//! The attempt loop, written once for every face that retries (the client, the middleware,
//! the proxy): admit, send and read, the retry policy's word, record, the key's pause after a
//! throttling answer, the shared budget's settlement, then the wait before the next attempt
//! or the end. A [`Face`] is what differs: how an attempt is admitted and sent, what it
//! records, and what the request ends with. (The tower layer is admission and interpretation
//! around one call; its retries are `tower::retry`'s, deciding with the same `RetryPolicy`.)

use std::future::Future;
use std::time::Duration;

use http::Method;
use parking_lot::Mutex;
use rand::rngs::StdRng;
use tokio::time::Instant;

use super::admission::Admission;
use super::answer::{Answer, wait_to_retry};
use super::report::{Reporter, SharedDue, settle_shared};
use super::retry::{Decision, GiveUpReason, RetryPolicy};
use crate::engine::Limiter;

/// One attempt sent and read: when it left, how long the answer took, and the answer.
#[derive(Debug)]
pub struct Sent<H> {
    /// When the attempt left.
    pub sent_at: Instant,
    /// From leaving to the answer (or to the error).
    pub service_time: Duration,
    /// What came back, read: its status and rate-limit headers, the rest as the face holds it.
    pub answer: Answer<H>,
}

/// What the loop reads of a request to decide and report, the same for all its attempts.
#[derive(Debug, Clone, Copy)]
pub struct Steps<'a> {
    /// Its key's limiter, paused after a throttling answer.
    pub limiter: Option<&'a Limiter>,
    /// Its key's retry policy.
    pub retry: &'a RetryPolicy,
    /// Its method (the policy retries non-idempotent ones only when it says so).
    pub method: &'a Method,
    /// Its events.
    pub report: &'a Reporter<'a>,
    /// The generator the backoff's jitter draws from.
    pub rng: &'a Mutex<StdRng>,
}

/// A face of the pipeline: the transport of each attempt and the ends of a request.
pub trait Face: Send {
    /// What an answer holds besides its status and rate-limit headers (the client the headers
    /// and body it read, the proxy the upstream response to stream on).
    type Held: Send;
    /// What the request ends with (a response or an error, in the face's terms).
    type Output;

    /// The request as the loop reads it.
    fn steps(&self) -> Steps<'_>;

    /// Whether the request can be sent again: a body that streamed through cannot, and a
    /// retry the policy decided becomes a give-up (its answer goes back as it came).
    fn replayable(&self) -> bool {
        true
    }

    /// Waits for attempt `attempt`'s admission ([`AdmissionStep`](super::admission::AdmissionStep));
    /// a refusal ends the request with the face's answer to it.
    fn admit(&mut self, attempt: u32) -> impl Future<Output = Result<Admission, Self::Output>> + Send;

    /// Sends the attempt and reads the answer (`ResponseHead::interpret`: its rate-limit
    /// headers, and what an adaptive key's mirror makes of them).
    fn send(&mut self, attempt: u32, admission: &Admission) -> impl Future<Output = Sent<Self::Held>> + Send;

    /// What the face keeps of an attempt the policy has decided on, before its slot goes back:
    /// the cost its answer says it spent, a log entry. Returns the shared budget's settlement
    /// when one is due.
    fn record(
        &mut self,
        _attempt: u32,
        _admission: &mut Admission,
        _sent: &Sent<Self::Held>,
        _decision: &Decision,
    ) -> Option<SharedDue> {
        None
    }

    /// The attempt will be retried: the face lets go of what it kept of it (a response whose
    /// connection must not wait out the retry delay).
    fn retrying(&mut self) {}

    /// The request ends with the attempt the policy is done with (a response it does not
    /// retry), admitted by `admission` (a streamed body holds its slot).
    fn finish(
        self,
        attempt: u32,
        sent: Sent<Self::Held>,
        admission: Admission,
    ) -> impl Future<Output = Self::Output> + Send;

    /// The request ends because the policy gave up after `attempt` attempts.
    fn give_up(
        self,
        attempt: u32,
        sent: Sent<Self::Held>,
        admission: Admission,
        reason: GiveUpReason,
    ) -> impl Future<Output = Self::Output> + Send;
}

/// Every attempt of a request through `face`, until it ends. The one place the retry policy
/// is asked about an attempt, the key paused after a throttling answer, and the slot given
/// back before a retry's wait (which holds none).
pub async fn run<F: Face>(mut face: F) -> F::Output {
    let mut previous_delay = None;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut admission = match face.admit(attempt).await {
            Ok(admission) => admission,
            Err(refused) => return refused,
        };
        let sent = face.send(attempt, &admission).await;
        let decision = decide(&face, attempt, &sent, previous_delay);
        let due = face.record(attempt, &mut admission, &sent, &decision);
        let steps = face.steps();
        sent.answer.pause_key(steps.limiter, &decision, steps.retry, attempt, steps.report);
        if let Some(due) = due {
            settle_shared(due, steps.report).await;
        }
        match decision {
            Decision::Retry { delay, reason } => {
                let cause = sent.answer.cause();
                // The answer (its connection) and the slot go back before the wait.
                drop(sent);
                drop(admission);
                face.retrying();
                previous_delay = Some(delay);
                wait_to_retry(face.steps().report, attempt, delay, reason, cause).await;
            }
            Decision::Done => return face.finish(attempt, sent, admission).await,
            Decision::GiveUp(reason) => return face.give_up(attempt, sent, admission, reason).await,
        }
    }
}

/// The retry policy's word on an attempt; a retry of a request that cannot be sent again is
/// a give-up.
fn decide<F: Face>(face: &F, attempt: u32, sent: &Sent<F::Held>, previous_delay: Option<Duration>) -> Decision {
    let steps = face.steps();
    let rng = &mut LockedRng(steps.rng);
    let decision = steps.retry.decide(attempt, &sent.answer.outcome(), steps.method, previous_delay, rng);
    match decision {
        Decision::Retry { .. } if !face.replayable() => Decision::GiveUp(GiveUpReason::NotRetryable),
        decision => decision,
    }
}

/// A shared generator, locked only when a decision draws from it (a backoff's jitter), not
/// for every answer.
struct LockedRng<'a>(&'a Mutex<StdRng>);

impl rand::RngCore for LockedRng<'_> {
    fn next_u32(&mut self) -> u32 {
        self.0.lock().next_u32()
    }

    fn next_u64(&mut self) -> u64 {
        self.0.lock().next_u64()
    }

    fn fill_bytes(&mut self, destination: &mut [u8]) {
        self.0.lock().fill_bytes(destination);
    }
}
