//! Request coalescing: identical in-flight requests (same method, URL and headers, no body)
//! share one upstream exchange; the first is the leader, the rest follow and get a copy of
//! its outcome.
//!
//! Only `GET` and `HEAD` coalesce: they are safe, so one answer serves every caller. The key
//! covers every header the request carries (after the client's defaults and host headers are
//! merged), so two requests that differ in `Authorization`, `Accept` or anything else the
//! server might vary on never share an answer. A leader whose future is dropped before it has
//! an outcome hands over: its followers wake and one of them leads anew.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use http::{HeaderMap, Method};
use parking_lot::Mutex;
use tokio::sync::watch;
use url::Url;

/// What makes two requests identical: method, URL and every header, names and values.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FlightKey {
    method: Method,
    url: String,
    /// Headers sorted by name, then value, so insertion order does not matter.
    headers: Vec<(String, Vec<u8>)>,
}

impl FlightKey {
    /// The key of a request, or `None` when it must not coalesce: a method other than `GET`
    /// or `HEAD`, or a body.
    pub fn of(method: &Method, url: &Url, headers: &HeaderMap, has_body: bool) -> Option<Self> {
        if has_body || !(method == Method::GET || method == Method::HEAD) {
            return None;
        }
        let mut pairs: Vec<(String, Vec<u8>)> =
            headers.iter().map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec())).collect();
        pairs.sort_unstable();
        Some(Self { method: method.clone(), url: url.as_str().to_owned(), headers: pairs })
    }

    /// A short stable fingerprint, for logs and events.
    pub fn fingerprint(&self) -> u64 {
        let mut hasher = DefaultHasher::new();
        self.hash(&mut hasher);
        hasher.finish()
    }
}

/// The flights in the air, by key. `T` is the outcome every member of a flight gets a copy of.
#[derive(Debug)]
pub struct Coalescer<T> {
    flights: Mutex<HashMap<FlightKey, watch::Receiver<Option<T>>>>,
}

impl<T> Default for Coalescer<T> {
    fn default() -> Self {
        Self { flights: Mutex::new(HashMap::new()) }
    }
}

/// A request's part in its flight.
#[derive(Debug)]
pub enum Role<'a, T> {
    /// Send the request, then [`Leader::land`] its outcome for the followers.
    Leader(Leader<'a, T>),
    /// Wait for the leader's outcome with [`Follower::outcome`].
    Follower(Follower<'a, T>),
}

/// The request that goes upstream for its flight. Dropping it without landing (a cancelled
/// request) lets one of its followers lead instead.
#[derive(Debug)]
pub struct Leader<'a, T> {
    coalescer: &'a Coalescer<T>,
    key: Option<FlightKey>,
    sender: watch::Sender<Option<T>>,
}

/// A request waiting for a leader's outcome.
#[derive(Debug)]
pub struct Follower<'a, T> {
    coalescer: &'a Coalescer<T>,
    key: FlightKey,
    receiver: watch::Receiver<Option<T>>,
}

impl<T: Clone> Coalescer<T> {
    /// Joins the flight of `key`: leads it when none is in the air, else follows.
    pub fn join(&self, key: FlightKey) -> Role<'_, T> {
        let mut flights = self.flights.lock();
        if let Some(receiver) = flights.get(&key)
            && receiver.has_changed().is_ok()
        {
            return Role::Follower(Follower { coalescer: self, key, receiver: receiver.clone() });
        }
        let (sender, receiver) = watch::channel(None);
        flights.insert(key.clone(), receiver);
        Role::Leader(Leader { coalescer: self, key: Some(key), sender })
    }
}

impl<T> Coalescer<T> {
    /// Flights in the air now.
    pub fn in_flight(&self) -> usize {
        self.flights.lock().len()
    }

    fn remove(&self, key: &FlightKey, sender: &watch::Sender<Option<T>>) {
        let mut flights = self.flights.lock();
        // Only this leader's own entry: a follower that took over may have replaced it.
        if flights.get(key).is_some_and(|receiver| receiver.same_channel(&sender.subscribe())) {
            flights.remove(key);
        }
    }
}

impl<T: Clone> Leader<'_, T> {
    /// Hands `outcome` to every follower and ends the flight: a request arriving from now on
    /// goes upstream itself.
    pub fn land(mut self, outcome: &T) {
        if let Some(key) = self.key.take() {
            self.coalescer.remove(&key, &self.sender);
        }
        // No receiver left is fine: nobody followed.
        let _ = self.sender.send(Some(outcome.clone()));
    }
}

impl<T> Drop for Leader<'_, T> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.coalescer.remove(&key, &self.sender);
        }
    }
}

impl<'a, T: Clone> Follower<'a, T> {
    /// The leader's outcome; or, when the leader was cancelled before it had one, this
    /// request's new role in a fresh flight of the same key.
    pub async fn outcome(mut self) -> Result<T, Role<'a, T>> {
        loop {
            if let Some(outcome) = self.receiver.borrow_and_update().as_ref() {
                return Ok(outcome.clone());
            }
            if self.receiver.changed().await.is_err() {
                // The sender is gone: either it landed (the value is there) or it was dropped.
                if let Some(outcome) = self.receiver.borrow().as_ref() {
                    return Ok(outcome.clone());
                }
                return Err(self.coalescer.join(self.key));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(url: &str, headers: &[(&str, &str)]) -> FlightKey {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(http::HeaderName::from_bytes(name.as_bytes()).unwrap(), value.parse().unwrap());
        }
        FlightKey::of(&Method::GET, &Url::parse(url).unwrap(), &map, false).unwrap()
    }

    #[test]
    fn only_bodiless_gets_and_heads_coalesce_and_every_header_counts() {
        let url = Url::parse("http://h/items").unwrap();
        let none = HeaderMap::new();
        assert!(FlightKey::of(&Method::HEAD, &url, &none, false).is_some());
        assert!(FlightKey::of(&Method::POST, &url, &none, false).is_none());
        assert!(FlightKey::of(&Method::PUT, &url, &none, false).is_none());
        assert!(FlightKey::of(&Method::GET, &url, &none, true).is_none());
        assert_eq!(
            key("http://h/a", &[("accept", "x"), ("a", "1")]),
            key("http://h/a", &[("a", "1"), ("accept", "x")])
        );
        assert_ne!(key("http://h/a", &[("authorization", "one")]), key("http://h/a", &[("authorization", "two")]));
        assert_ne!(key("http://h/a", &[]), key("http://h/a?x=1", &[]));
        assert_ne!(key("http://h/a", &[]).fingerprint(), key("http://h/b", &[]).fingerprint());
    }

    #[tokio::test]
    async fn followers_get_the_leaders_outcome_and_the_flight_ends_when_it_lands() {
        let coalescer = Coalescer::<u32>::default();
        let Role::Leader(leader) = coalescer.join(key("http://h/a", &[])) else { panic!("first must lead") };
        let Role::Follower(first) = coalescer.join(key("http://h/a", &[])) else { panic!("second must follow") };
        let Role::Follower(second) = coalescer.join(key("http://h/a", &[])) else { panic!("third must follow") };
        assert!(matches!(coalescer.join(key("http://h/other", &[])), Role::Leader(_)));
        assert_eq!(coalescer.in_flight(), 1, "a dropped leader of another key ended its flight");
        leader.land(&7);
        assert_eq!(coalescer.in_flight(), 0);
        assert_eq!(first.outcome().await.unwrap(), 7);
        assert_eq!(second.outcome().await.unwrap(), 7);
        assert!(matches!(coalescer.join(key("http://h/a", &[])), Role::Leader(_)), "after landing, a new flight");
    }

    #[tokio::test]
    async fn a_cancelled_leader_hands_the_flight_to_a_follower() {
        let coalescer = Coalescer::<u32>::default();
        let Role::Leader(leader) = coalescer.join(key("http://h/a", &[])) else { panic!() };
        let Role::Follower(first) = coalescer.join(key("http://h/a", &[])) else { panic!() };
        let Role::Follower(second) = coalescer.join(key("http://h/a", &[])) else { panic!() };
        drop(leader);
        let Err(Role::Leader(new_leader)) = first.outcome().await else { panic!("the first follower leads anew") };
        let Err(Role::Follower(still)) = second.outcome().await else { panic!("the second follows the new leader") };
        new_leader.land(&9);
        assert_eq!(still.outcome().await.unwrap(), 9);
    }
}
