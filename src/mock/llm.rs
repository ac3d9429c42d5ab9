//! The LLM-like route (`api = "llm"`): a chat completion's token usage from its request, and
//! the answer that reports it.
//!
//! A request is a JSON object; `max_tokens` (default 256, at most 32,768) bounds the
//! completion. Prompt tokens are the body's length in bytes divided by 4, rounded up (what a
//! `body/4` estimate guesses); the completion is between half of `max_tokens` (rounded up) and
//! all of it, drawn from a hash of the body and the server's seed, so the same request always
//! gets the same usage. The tokens budget admits a request while it has any token left and is
//! charged the whole usage, into debt if need be, since a completion's length is known only
//! once written; a request whose prompt plus `max_tokens` exceeds a tokens limit could never
//! fit and is refused with 400.

use serde_json::{Value, json};

use super::policy::UnitCharge;
use super::server::fnv1a;
use crate::engine::Unit;

/// The completion bound of a request without `max_tokens`.
pub const DEFAULT_MAX_TOKENS: u64 = 256;
/// The largest `max_tokens` accepted.
pub const MAX_MAX_TOKENS: u64 = 32_768;

/// What one chat completion spends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Tokens of the prompt.
    pub prompt_tokens: u64,
    /// Tokens of the answer (at most `max_tokens`).
    pub completion_tokens: u64,
    /// The request's bound on the completion.
    pub max_tokens: u64,
}

impl Usage {
    /// The usage of a request with `body` on a server seeded with `seed`; an error says what is
    /// wrong with the body.
    pub fn of(body: &[u8], seed: u64) -> Result<Self, String> {
        let json: Value =
            serde_json::from_slice(body).map_err(|err| format!("the body is not JSON ({err}); send a chat request"))?;
        if !json.is_object() {
            return Err("the body is not a JSON object; send {\"messages\": [...], \"max_tokens\": 100}".into());
        }
        let max_tokens = match json.get("max_tokens") {
            None | Some(Value::Null) => DEFAULT_MAX_TOKENS,
            Some(value) => value
                .as_u64()
                .filter(|n| (1..=MAX_MAX_TOKENS).contains(n))
                .ok_or_else(|| format!("max_tokens {value} is not a whole number from 1 to {MAX_MAX_TOKENS}"))?,
        };
        let prompt_tokens = (body.len() as u64).div_ceil(4);
        let least = max_tokens.div_ceil(2);
        let completion_tokens = least + mix(fnv1a(body) ^ seed) % (max_tokens - least + 1);
        Ok(Self { prompt_tokens, completion_tokens, max_tokens })
    }

    /// Prompt and completion tokens together.
    pub fn total_tokens(&self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }

    /// The most this request could spend: its prompt and a full completion.
    pub fn ceiling(&self) -> u64 {
        self.prompt_tokens + self.max_tokens
    }

    /// Admitted while the tokens budget has a token left; charged the whole usage.
    pub fn charges(&self) -> Vec<UnitCharge> {
        vec![UnitCharge { unit: Unit::tokens(), needed: 1, spent: self.total_tokens() }]
    }

    /// The answer of an admitted request, shaped like a chat completion.
    pub fn answer(&self, route: &str) -> Value {
        let finish = if self.completion_tokens == self.max_tokens { "length" } else { "stop" };
        json!({
            "object": "chat.completion",
            "model": "ratescope-demo",
            "route": route,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": format!("({} tokens of demo text)", self.completion_tokens)},
                "finish_reason": finish,
            }],
            "usage": {
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "total_tokens": self.total_tokens(),
            },
        })
    }
}

/// SplitMix64's finaliser: spreads a hash's bits so a remainder of it is uniform.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_is_the_prompt_by_four_plus_a_seeded_completion_within_max_tokens() {
        let body = br#"{"messages": [{"role": "user", "content": "hello"}], "max_tokens": 100}"#;
        let usage = Usage::of(body, 7).unwrap();
        assert_eq!(usage.prompt_tokens, (body.len() as u64).div_ceil(4));
        assert!((50..=100).contains(&usage.completion_tokens), "{usage:?}");
        assert_eq!(Usage::of(body, 7).unwrap(), usage, "the same request, the same usage");
        let completions: std::collections::BTreeSet<u64> =
            (0..20).map(|seed| Usage::of(body, seed).unwrap().completion_tokens).collect();
        assert!(completions.len() > 5, "the seed varies the completion: {completions:?}");
        let answer = usage.answer("/v1/chat/completions");
        assert_eq!(answer["usage"]["total_tokens"], usage.total_tokens());
        assert_eq!(Usage::of(b"{}", 0).unwrap().max_tokens, DEFAULT_MAX_TOKENS);
    }

    #[test]
    fn bad_requests_say_what_is_wrong() {
        for (body, expected) in [
            (&b"hello"[..], "not JSON"),
            (b"[1]", "not a JSON object"),
            (br#"{"max_tokens": 0}"#, "max_tokens 0 is not a whole number"),
            (br#"{"max_tokens": 1e9}"#, "from 1 to 32768"),
            (br#"{"max_tokens": "lots"}"#, "max_tokens \"lots\""),
        ] {
            let err = Usage::of(body, 0).unwrap_err();
            assert!(err.contains(expected), "{err}");
        }
    }
}
