//! Fuzzes the proxy's routing of a caller's request-target: whatever the bytes, a target the
//! proxy would forward lies under the route's base path, as a path with no dot segment left in
//! any spelling (normalising it again changes nothing), and made a URL (as for an HTTPS
//! upstream) it is on the route's upstream and still so; the readings its limits are matched
//! against end in one with nothing left to read otherwise; anything else is a 400 or a 404
//! before a key is attached.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ratescope::proxy::path::{is_under, lenient_readings, normalise};
use ratescope::proxy::{ProxyConfig, Route};

/// Route tables to route against: overlapping prefixes, bases at the root and deeper.
const TABLES: [&[(&str, &str)]; 3] = [
    &[("c", "http://127.0.0.1:9/api/v1")],
    &[("a", "http://127.0.0.1:9/from-a/"), ("a/b", "http://127.0.0.2:9/from-ab"), ("x.y", "http://127.0.0.3:9/")],
    &[("api", "http://127.0.0.1:9/admin"), ("api/v2", "http://127.0.0.1:9/admin/v2")],
];

fuzz_target!(|data: &[u8]| {
    let Some((&choice, rest)) = data.split_first() else { return };
    let Ok(target) = std::str::from_utf8(rest) else { return };
    let table = TABLES[usize::from(choice) % TABLES.len()];
    let routes = table.iter().map(|(prefix, upstream)| Route::new(prefix, upstream).unwrap()).collect();
    let config = ProxyConfig::new(routes);
    let Ok(uri) = target.parse::<http::Uri>() else { return };
    match config.upstream_for(&uri) {
        Ok((route, sent)) => {
            assert!(is_under(sent.path(), route.upstream.path()), "{target:?} -> {sent} outside {}", route.upstream);
            assert_eq!(normalise(sent.path()).as_deref(), Ok(sent.path()), "{target:?} -> {sent} still has dot segments");
            if let Some(last) = lenient_readings(sent.path()).last() {
                assert!(lenient_readings(last).is_empty(), "{target:?} -> {sent}: {last} reads otherwise again");
            }
            let url = route.url_of(&sent).unwrap();
            assert_eq!(url.origin(), route.upstream.origin(), "{target:?} -> {url}");
            assert!(is_under(url.path(), route.upstream.path()), "{target:?} -> {url} outside {}", route.upstream);
            assert_eq!(normalise(url.path()).as_deref(), Ok(url.path()), "{target:?} -> {url} still has dot segments");
        }
        Err(refusal) => {
            let status = refusal.status().as_u16();
            assert!(status == 400 || status == 404, "{target:?}: {refusal} as {status}");
        }
    }
});
