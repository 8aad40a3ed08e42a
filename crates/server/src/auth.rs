//! Who may call, and how often: the cache of known API keys, the throttle
//! of failed key checks, and the per-project rate limit the request
//! extractor ([`crate::http::Project`]) consults.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use shellgate_store::KeyGrant;

use crate::error::ApiError;
use shellgate_wire::ErrorCode;

/// A new API key (printed once by `shellgate keys create`, shown once by the
/// console's operator page; stored hashed): 35 characters, 128 random bits.
pub fn new_api_key() -> String {
    shellgate_wire::new_id("sg-")
}

/// Keys already seen, by hash, with their grants, each for at most
/// [`KEY_CACHE_TTL`]: a hit needs no trip to the store, and a key revoked
/// anywhere (`shellgate keys revoke`, another process on the same database)
/// stops opening anything within that time. Only keys that exist are
/// remembered (a wrong key always asks the store), and the cache is bounded.
#[derive(Debug, Default)]
pub struct KeyCache(Mutex<HashMap<String, (KeyGrant, Instant)>>);

/// Most keys remembered.
const KEY_CACHE_ENTRIES: usize = 10_000;
/// How long a key's grant is trusted without asking the store again.
pub const KEY_CACHE_TTL: Duration = Duration::from_secs(5);

impl KeyCache {
    /// The grant of the key whose hash is `hash`, if it is remembered.
    pub fn get(&self, hash: &str) -> Option<KeyGrant> {
        let keys = self.0.lock().unwrap_or_else(|p| p.into_inner());
        keys.get(hash)
            .filter(|(_, at)| at.elapsed() < KEY_CACHE_TTL)
            .map(|(grant, _)| grant.clone())
    }

    /// Remembers the grant of the key whose hash is `hash`.
    pub fn insert(&self, hash: &str, grant: &KeyGrant) {
        let mut keys = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if keys.len() >= KEY_CACHE_ENTRIES {
            keys.retain(|_, (_, at)| at.elapsed() < KEY_CACHE_TTL);
            if keys.len() >= KEY_CACHE_ENTRIES {
                keys.clear();
            }
        }
        keys.insert(hash.to_owned(), (grant.clone(), Instant::now()));
    }
}

/// One attempt to open something with an API key: who tried (the client's
/// address, or its IPv6 /64: one host's addresses are one client), which
/// key (its hash), and the key's first characters (the guesses at one key,
/// or at keys of one shape, from many addresses share them).
#[derive(Debug, Clone)]
pub struct KeyAttempt {
    client: Option<IpAddr>,
    prefix: String,
    hash: String,
}

/// How many characters of a key its prefix bucket is named by.
const PREFIX_CHARS: usize = 8;

impl KeyAttempt {
    pub fn new(client: Option<IpAddr>, key: &str) -> Self {
        Self {
            client: client.map(client_block),
            prefix: key.chars().take(PREFIX_CHARS).collect(),
            hash: shellgate_store::hash_key(key),
        }
    }

    /// The key's hash (what the store and the key cache know it by).
    pub fn hash(&self) -> &str {
        &self.hash
    }
}

/// The block an address stands for: an IPv4 address itself (a mapped one
/// as IPv4), an IPv6 address's /64 (what one host or site is given).
fn client_block(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let segments = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(
                    segments[0],
                    segments[1],
                    segments[2],
                    segments[3],
                    0,
                    0,
                    0,
                    0,
                ))
            }
        },
    }
}

/// Failed key checks, throttled per client address and per key prefix: each
/// is a bucket of [`FAILURE_BURST`] failures that refills at
/// [`FAILURES_PER_MINUTE`]. While either bucket of an attempt is empty, the
/// attempt is refused with a 429 (and `Retry-After`) before its key is
/// looked at, right or wrong: a throttled client learns nothing, not even
/// that a key is right. A right key is never slowed where it is known: a
/// key that has opened something from a client's address before keeps
/// opening it from there whatever the buckets say (for a day since its last
/// use), so a tenant sharing an address with a guesser, or owning a key
/// whose prefix is being guessed at, is not locked out. Right keys cost no
/// bucket; the check adds no wait to any request.
///
/// Kept in memory, per process: in a cluster each node and each replica
/// throttles what reaches it (a node by the client address its replica
/// names).
#[derive(Debug, Default)]
pub struct KeyThrottle(Mutex<ThrottleState>);

/// Failures a bucket holds before it refuses.
pub const FAILURE_BURST: f64 = 20.0;
/// How fast a bucket refills.
pub const FAILURES_PER_MINUTE: f64 = 20.0;
/// How long a key that opened something from an address stays known there.
const PROVEN_FOR: Duration = Duration::from_secs(24 * 3600);
/// Most buckets, and most (address, key) pairs, remembered.
const THROTTLE_ENTRIES: usize = 100_000;

#[derive(Debug, Default)]
struct ThrottleState {
    buckets: HashMap<Bucket, Allowance>,
    /// Keys (by hash) that opened something, by the address they came from.
    proven: HashMap<Option<IpAddr>, HashMap<String, Instant>>,
    proven_count: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Bucket {
    Client(IpAddr),
    Prefix(String),
}

/// What is left of a bucket at a time.
#[derive(Debug, Clone, Copy)]
struct Allowance {
    failures_left: f64,
    at: Instant,
}

impl Allowance {
    fn full(now: Instant) -> Self {
        Self {
            failures_left: FAILURE_BURST,
            at: now,
        }
    }

    /// Refilled up to `now`.
    fn at(self, now: Instant) -> Self {
        let minutes = now.saturating_duration_since(self.at).as_secs_f64() / 60.0;
        Self {
            failures_left: (self.failures_left + minutes * FAILURES_PER_MINUTE).min(FAILURE_BURST),
            at: now,
        }
    }

    /// Seconds until one more failure is allowed (0: now).
    fn wait(self) -> u64 {
        let missing = 1.0 - self.failures_left;
        if missing <= 0.0 {
            0
        } else {
            (missing * 60.0 / FAILURES_PER_MINUTE).ceil().max(1.0) as u64
        }
    }
}

impl KeyThrottle {
    /// Refuses `attempt` (429) while its client's or its prefix's bucket is
    /// empty, unless its key is known from that address.
    pub fn admit(&self, attempt: &KeyAttempt) -> Result<(), ApiError> {
        self.admit_at(attempt, Instant::now())
    }

    /// Counts `attempt`'s key as wrong, against both its buckets.
    pub fn failed(&self, attempt: &KeyAttempt) {
        self.failed_at(attempt, Instant::now());
    }

    /// Remembers that `attempt`'s key opened something from its address.
    pub fn succeeded(&self, attempt: &KeyAttempt) {
        self.succeeded_at(attempt, Instant::now());
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ThrottleState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn buckets(attempt: &KeyAttempt) -> impl Iterator<Item = Bucket> + '_ {
        attempt
            .client
            .map(Bucket::Client)
            .into_iter()
            .chain(std::iter::once(Bucket::Prefix(attempt.prefix.clone())))
    }

    fn admit_at(&self, attempt: &KeyAttempt, now: Instant) -> Result<(), ApiError> {
        let state = self.state();
        if state.buckets.is_empty() {
            return Ok(());
        }
        let wait = Self::buckets(attempt)
            .filter_map(|bucket| state.buckets.get(&bucket))
            .map(|allowance| allowance.at(now).wait())
            .max()
            .unwrap_or(0);
        if wait == 0 {
            return Ok(());
        }
        let known = state
            .proven
            .get(&attempt.client)
            .and_then(|keys| keys.get(&attempt.hash))
            .is_some_and(|at| now.saturating_duration_since(*at) < PROVEN_FOR);
        if known {
            return Ok(());
        }
        Err(ApiError::of(
            ErrorCode::TooManyFailedKeys,
            format!(
                "Too many wrong API keys from this address or for keys like this one: retry in \
                 {wait} s."
            ),
        )
        .with_retry_after(wait))
    }

    fn failed_at(&self, attempt: &KeyAttempt, now: Instant) {
        let mut state = self.state();
        if state.buckets.len() >= THROTTLE_ENTRIES {
            state.prune(now);
        }
        for bucket in Self::buckets(attempt) {
            let allowance = state
                .buckets
                .get(&bucket)
                .map_or_else(|| Allowance::full(now), |a| a.at(now));
            state.buckets.insert(
                bucket,
                Allowance {
                    failures_left: (allowance.failures_left - 1.0).max(0.0),
                    at: now,
                },
            );
        }
    }

    fn succeeded_at(&self, attempt: &KeyAttempt, now: Instant) {
        let mut state = self.state();
        let fresh = state
            .proven
            .get(&attempt.client)
            .and_then(|keys| keys.get(&attempt.hash))
            .is_some_and(|at| now.saturating_duration_since(*at) < Duration::from_secs(60));
        if fresh {
            return;
        }
        if state.proven_count >= THROTTLE_ENTRIES {
            state.proven.retain(|_, keys| {
                keys.retain(|_, at| now.saturating_duration_since(*at) < PROVEN_FOR);
                !keys.is_empty()
            });
            state.proven_count = state.proven.values().map(HashMap::len).sum();
            if state.proven_count >= THROTTLE_ENTRIES {
                state.proven.clear();
                state.proven_count = 0;
            }
        }
        let keys = state.proven.entry(attempt.client).or_default();
        let added = keys.insert(attempt.hash.clone(), now).is_none();
        if added {
            state.proven_count += 1;
        }
    }
}

impl ThrottleState {
    /// Makes room: full buckets say nothing and go first; then the prefix
    /// buckets (cheap to fill again); the address buckets last of all.
    fn prune(&mut self, now: Instant) {
        self.buckets
            .retain(|_, allowance| allowance.at(now).failures_left < FAILURE_BURST);
        if self.buckets.len() >= THROTTLE_ENTRIES {
            self.buckets
                .retain(|bucket, _| matches!(bucket, Bucket::Client(_)));
        }
        if self.buckets.len() >= THROTTLE_ENTRIES {
            self.buckets.clear();
        }
    }
}

/// A fixed-window limit of requests per project and minute.
#[derive(Debug)]
pub struct RateLimiter {
    per_minute: u32,
    windows: Mutex<HashMap<String, (Instant, u32)>>,
}

impl RateLimiter {
    pub fn new(per_minute: u32) -> Self {
        Self {
            per_minute,
            windows: Mutex::new(HashMap::new()),
        }
    }

    pub fn check(&self, project: &str) -> Result<(), ApiError> {
        if self.per_minute == 0 {
            return Ok(());
        }
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let entry = windows.entry(project.to_owned()).or_insert((now, 0));
        let elapsed = now.duration_since(entry.0).as_secs();
        if elapsed >= 60 {
            *entry = (now, 0);
        }
        if entry.1 >= self.per_minute {
            return Err(ApiError::rate_limited(60u64.saturating_sub(elapsed).max(1)));
        }
        entry.1 += 1;
        Ok(())
    }
}

/// The traffic access token of the sandbox whose access token is
/// `access_token` (E2B's `trafficAccessToken`, given with the access token
/// by create and connect). E2B's SDKs send it as `E2B-Traffic-Access-Token`
/// where they send no access token: the code interpreter's contexts and a
/// private sandbox's ports. It is derived one way (SHA-256 under a label of
/// its own), so nothing needs storing, it opens only the routes that take
/// it, and it never gives the access token away.
pub(crate) fn e2b_traffic_token(access_token: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(b"shellgate e2b traffic access token\0");
    hasher.update(access_token.as_bytes());
    let hex: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("e2btt_{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(client: &str, key: &str) -> KeyAttempt {
        KeyAttempt::new(Some(client.parse().unwrap()), key)
    }

    #[test]
    fn wrong_keys_from_one_address_are_throttled_and_a_known_key_is_not() {
        let throttle = KeyThrottle::default();
        let now = Instant::now();
        let right = attempt("192.0.2.1", "sk-right-key-of-alpha");
        throttle.admit_at(&right, now).unwrap();
        throttle.succeeded_at(&right, now);
        let burst = FAILURE_BURST as usize;
        for n in 0..burst {
            // Each of another prefix: only the address's bucket empties.
            let wrong = attempt("192.0.2.1", &format!("{n:02}-guess-xxxxxxxx"));
            throttle.admit_at(&wrong, now).unwrap();
            throttle.failed_at(&wrong, now);
        }
        let next = attempt("192.0.2.1", "99-guess-xxxxxxxx");
        let refused = throttle.admit_at(&next, now).unwrap_err();
        assert_eq!(refused.status(), axum::http::StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused.retry_after, Some(3));
        // A key never seen from there waits too, right or wrong: the
        // refusal says nothing of the key.
        assert!(throttle
            .admit_at(&attempt("192.0.2.1", "sk-other-right-key"), now)
            .is_err());
        // The key known from that address still opens at once; another
        // address is not throttled at all.
        throttle.admit_at(&right, now).unwrap();
        throttle
            .admit_at(&attempt("192.0.2.2", "00-guess-yyyyyyyy"), now)
            .unwrap();
        // The bucket refills: one more guess after 3 s.
        let later = now + Duration::from_secs(3);
        throttle.admit_at(&next, later).unwrap();
        throttle.failed_at(&next, later);
        assert!(throttle.admit_at(&next, later).is_err());
    }

    #[test]
    fn guesses_at_one_prefix_from_many_addresses_are_throttled() {
        let throttle = KeyThrottle::default();
        let now = Instant::now();
        for n in 0..FAILURE_BURST as u8 {
            let wrong = attempt(&format!("198.51.100.{n}"), &format!("sk-alpha-{n}"));
            throttle.admit_at(&wrong, now).unwrap();
            throttle.failed_at(&wrong, now);
        }
        assert!(throttle
            .admit_at(&attempt("203.0.113.9", "sk-alpha-guess"), now)
            .is_err());
        // Another prefix, from a fresh address: untouched.
        throttle
            .admit_at(&attempt("203.0.113.9", "sg-0123456789"), now)
            .unwrap();
    }

    #[test]
    fn an_ipv6_host_is_its_64() {
        let a = attempt("2001:db8:1:2:aaaa::1", "k");
        let b = attempt("2001:db8:1:2:bbbb::2", "k");
        let c = attempt("2001:db8:1:3::1", "k");
        assert_eq!(a.client, b.client);
        assert_ne!(a.client, c.client);
        let mapped = attempt("::ffff:192.0.2.1", "k");
        assert_eq!(mapped.client, Some("192.0.2.1".parse().unwrap()));
    }
}
