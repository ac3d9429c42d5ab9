//! Fuzzes profile files: text to `Profile::from_toml`. A profile that parses must convert
//! without error (every accessor the client uses), and writing it with `to_toml` must give a
//! text that reads back to the same profile and writes again to the same text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ratescope::Profile;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let profile = match Profile::from_toml(text) {
        Ok(profile) => profile,
        Err(err) => {
            // Errors are placed inside the text: never past its last line.
            if let Some(position) = err.position() {
                assert!(position.line >= 1 && position.line <= text.lines().count().max(1) + 1, "{err}");
            }
            let _ = err.to_string();
            return;
        }
    };
    profile.validate().unwrap_or_else(|err| panic!("parsed but does not validate: {err}"));
    let entries = profile.entries().unwrap_or_else(|err| panic!("parsed but has no entries: {err}"));
    let expected: usize = profile.hosts.iter().map(|host| 1 + host.paths.len()).sum();
    assert_eq!(entries.len(), expected);
    for host in &profile.hosts {
        host.key().unwrap();
        host.limiter_config().unwrap().validate().unwrap();
        host.retry_policy().unwrap().validate().unwrap();
        host.default_headers().unwrap();
        assert_eq!(host.path_limits().unwrap().len(), host.paths.len());
    }

    let written = profile.to_toml().unwrap_or_else(|err| panic!("parsed but cannot be written: {err}"));
    let again =
        Profile::from_toml(&written).unwrap_or_else(|err| panic!("written text does not read: {err}\n{written}"));
    assert_eq!(again, profile, "the written text reads back different:\n{written}");
    assert_eq!(again.to_toml().unwrap(), written, "writing is not stable");
});
