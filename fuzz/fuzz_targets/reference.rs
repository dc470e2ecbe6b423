//! Reference parsing never panics, and every accepted reference re-parses to itself
//! (normalization is a fixed point) with the same parts.
#![no_main]

use imagemap::reference::Reference;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let _ = Reference::parse(s);
    if let Ok(r) = Reference::parse_normalized(s) {
        let again = Reference::parse_normalized(r.as_str()).expect("a normalized reference re-parses");
        assert_eq!(again, r, "re-parsing {:?} (from {s:?}) changed it", r.as_str());
        let familiar = Reference::parse_normalized(&r.familiar()).expect("the familiar form parses");
        assert_eq!(familiar, r, "the familiar form {:?} of {s:?} normalizes back", r.familiar());
    }
});
