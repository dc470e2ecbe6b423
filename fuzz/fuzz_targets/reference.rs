//! Reference parsing never panics, and every accepted reference re-parses to itself
//! (normalization is a fixed point) with the same parts.
#![no_main]

use imagemap::core::reference::Reference;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let _ = Reference::parse(s);
    if let Ok(r) = Reference::parse_normalized(s) {
        let again = Reference::parse_normalized(r.as_str()).expect("a normalized reference re-parses");
        assert_eq!(again, r, "re-parsing {:?} (from {s:?}) changed it", r.as_str());
        // The familiar form is not always a fixed point, in Docker either: the familiar
        // form of docker.io/a.b/c is a.b/c, whose first component reads as a registry.
        let _ = r.familiar();
    }
});
