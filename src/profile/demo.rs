//! The demo profile shipped in `assets/demo-profile.toml`, for the embedded demo API.

use url::Url;

use super::error::ProfileError;
use super::model::Profile;

/// The text of `assets/demo-profile.toml`.
pub const DEMO_TOML: &str = include_str!("../../assets/demo-profile.toml");

impl Profile {
    /// The profile named `demo` for the demo API at `http://127.0.0.1:8787`.
    pub fn demo() -> Result<Self, ProfileError> {
        Profile::from_toml(DEMO_TOML)
    }

    /// The demo profile for a demo API listening at `url` (a free port the OS chose, say).
    pub fn demo_at(url: &Url) -> Result<Self, ProfileError> {
        let mut profile = Self::demo()?;
        profile.point_demo_at(url);
        Ok(profile)
    }

    /// Moves this profile's hosts at the default demo address (`127.0.0.1:8787`) to `url`,
    /// where the demo API really runs; other hosts stay.
    pub fn point_demo_at(&mut self, url: &Url) {
        let actual = url.as_str().trim_end_matches('/');
        for host in &mut self.hosts {
            let at_demo = Url::parse(&host.base_url)
                .is_ok_and(|base| base.host_str() == Some("127.0.0.1") && base.port() == Some(8787));
            if at_demo {
                actual.clone_into(&mut host.base_url);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_demo_profile_follows_the_demo_api_to_its_port_and_leaves_other_hosts() {
        let url = Url::parse("http://127.0.0.1:40123/").unwrap();
        let mut profile = Profile::demo_at(&url).unwrap();
        assert!(profile.hosts.iter().all(|host| host.base_url == "http://127.0.0.1:40123"));
        profile.hosts[0].base_url = "https://api.example.com".into();
        profile.point_demo_at(&Url::parse("http://127.0.0.1:1/").unwrap());
        assert_eq!(profile.hosts[0].base_url, "https://api.example.com");
    }

    #[test]
    fn the_demo_profile_is_valid_and_describes_the_demo_api() {
        let demo = Profile::demo().unwrap();
        assert_eq!(demo.name, "demo");
        let host = &demo.hosts[0];
        assert_eq!(host.key().unwrap().to_string(), "127.0.0.1:8787");
        assert_eq!(host.limiter_config().unwrap().describe(), "bucket 5 @ 5/1s, window 100/1m");
        let paths: Vec<String> =
            host.path_limits().unwrap().iter().map(|(key, config)| format!("{key}: {}", config.describe())).collect();
        assert_eq!(
            paths,
            [
                "127.0.0.1:8787/search: window 2/1s, concurrency 1",
                "127.0.0.1:8787/slow: concurrency 3",
                "127.0.0.1:8787/flaky: window 60/1m",
                "127.0.0.1:8787/catalog: window 10/1m",
                "127.0.0.1:8787/v1/chat/completions: window 60/1m, window 20000 tokens/1m",
                "127.0.0.1:8787/graphql: window 1000 points/22s",
                "127.0.0.1:8787/open: no limits",
            ]
        );
        let chat = host.endpoint("chat").unwrap();
        assert_eq!(chat.url.as_str(), "http://127.0.0.1:8787/v1/chat/completions");
        assert_eq!(chat.cost_rules.len(), 1);
        let body = chat.body.as_deref().unwrap();
        let estimate = crate::http::cost::estimate(1, &chat.cost_rules, Some(body));
        let usage = crate::mock::Usage::of(body, 0).unwrap();
        assert_eq!(
            estimate.of(&crate::engine::Unit::tokens()),
            usage.ceiling(),
            "the estimate is the server's ceiling"
        );
        let products = host.endpoint("products").unwrap();
        let query = crate::mock::QueryCost::of(products.body.as_deref().unwrap()).unwrap();
        let estimate = crate::http::cost::estimate(1, &products.cost_rules, products.body.as_deref());
        assert_eq!(
            estimate.of(&crate::engine::Unit::points()),
            query.requested,
            "the comment's 54 is the requested cost"
        );
        assert!(host.secret_headers.is_empty(), "the demo needs no secret to run");
    }
}
