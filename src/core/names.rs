//! The string inside the core's names ([`super::InstanceId`], [`super::GroupName`],
//! [`super::NodeName`], and a pod's [`super::Namespace`], [`super::PodName`], [`super::PodUid`]).
//! A planning pass clones, hashes and compares thousands of them: EC2 instance ids, most group
//! names, namespaces and pod names fit in the value itself (no allocation to clone, no pointer to
//! follow to hash or compare), longer names are shared (a clone is a count, not a copy).

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Bytes kept inline: `i-` and 17 hex digits, with room to spare, and the value no larger than a
/// `String` (longer inline text measured slower: every map entry and node grows).
const INLINE: usize = 22;

/// An immutable string, inline when short.
#[derive(Clone)]
pub(crate) struct Text(Repr);

#[derive(Clone)]
enum Repr {
    Inline { len: u8, bytes: [u8; INLINE] },
    Shared(Arc<str>),
}

impl Text {
    /// The text as a string slice.
    pub(crate) fn as_str(&self) -> &str {
        match &self.0 {
            // Only `From<&str>` fills the bytes, from a valid string cut at its end.
            Repr::Inline { len, bytes } => std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default(),
            Repr::Shared(s) => s,
        }
    }

    /// The text's bytes, without the UTF-8 check that [`Text::as_str`] makes of inline text.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Repr::Shared(s) => s.as_bytes(),
        }
    }
}

impl From<&str> for Text {
    fn from(s: &str) -> Self {
        match u8::try_from(s.len()) {
            Ok(len) if s.len() <= INLINE => {
                let mut bytes = [0; INLINE];
                bytes[..s.len()].copy_from_slice(s.as_bytes());
                Text(Repr::Inline { len, bytes })
            }
            _ => Text(Repr::Shared(Arc::from(s))),
        }
    }
}

impl From<String> for Text {
    fn from(s: String) -> Self {
        Text::from(s.as_str())
    }
}

// Equality and order are the string's (byte order is UTF-8's char order), so a name behaves
// exactly as the `String` it replaced, in maps, sets, sorting and reports.
impl PartialEq for Text {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            // Unused bytes are zero, so whole arrays compare: a few word compares, no call.
            (Repr::Inline { len: a, bytes: x }, Repr::Inline { len: b, bytes: y }) => a == b && x == y,
            // A name cloned from the same object (a taint's signal and its Node) is one
            // allocation: no need to read it.
            (Repr::Shared(x), Repr::Shared(y)) if Arc::ptr_eq(x, y) => true,
            _ => self.as_bytes() == other.as_bytes(),
        }
    }
}

impl Eq for Text {}

impl PartialOrd for Text {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Text {
    fn cmp(&self, other: &Self) -> Ordering {
        match (&self.0, &other.0) {
            // Unused bytes are zero: comparing whole arrays, then lengths, orders as the strings
            // do ("ab" < "ab\0" < "abc"), as big-endian words instead of a byte loop.
            (Repr::Inline { len: a, bytes: x }, Repr::Inline { len: b, bytes: y }) => {
                words(x).cmp(&words(y)).then(a.cmp(b))
            }
            _ => self.as_bytes().cmp(other.as_bytes()),
        }
    }
}

/// Inline bytes as two big-endian words: their order is the bytes' order.
fn words(bytes: &[u8; INLINE]) -> (u128, u64) {
    let mut head = [0; 16];
    let mut tail = [0; 8];
    head.copy_from_slice(&bytes[..16]);
    tail[..INLINE - 16].copy_from_slice(&bytes[16..]);
    (u128::from_be_bytes(head), u64::from_be_bytes(tail))
}

impl Hash for Text {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        match &self.0 {
            // Only `From<&str>` builds a `Text`, and it keeps every string that fits inline, so
            // equal strings are both inline or both shared: inline ones may hash as their fixed
            // words (three, whatever the length), which is most of a planning pass's hashing.
            Repr::Inline { len, bytes } => {
                let (head, tail) = words(bytes);
                // Truncations are the point: the two halves of the first sixteen bytes.
                state.write_u64(head as u64);
                state.write_u64((head >> 64) as u64);
                state.write_u64(tail ^ u64::from(*len));
            }
            // What `str`'s `Hash` writes, without checking the bytes are UTF-8 again.
            Repr::Shared(s) => {
                state.write(s.as_bytes());
                state.write_u8(0xff);
            }
        }
    }
}

impl fmt::Debug for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Text {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Text {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;

        impl Visitor<'_> for TextVisitor {
            type Value = Text;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_str<E: de::Error>(self, s: &str) -> Result<Text, E> {
                Ok(Text::from(s))
            }
        }

        deserializer.deserialize_str(TextVisitor)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::hash_map::RandomState;
    use std::hash::BuildHasher;

    use super::*;
    use crate::core::fast_hash::FastState;

    const SHORT: &str = "i-0123456789abcdef0";
    const LONG: &str = "ip-10-0-1-23.eu-central-1.compute.internal";

    #[test]
    fn short_text_lives_inline_and_long_text_is_shared_and_both_read_back() {
        assert!(matches!(Text::from(SHORT).0, Repr::Inline { .. }));
        assert!(matches!(Text::from(LONG).0, Repr::Shared(_)));
        assert!(matches!(Text::from("x".repeat(INLINE)).0, Repr::Inline { .. }));
        assert!(matches!(Text::from("x".repeat(INLINE + 1)).0, Repr::Shared(_)));
        for s in [SHORT, LONG, "", "ü-ñ", "x".repeat(INLINE).as_str(), "x".repeat(INLINE + 1).as_str()] {
            assert_eq!(Text::from(s).as_str(), s);
            assert_eq!(Text::from(s).to_string(), s);
            assert_eq!(format!("{:?}", Text::from(s)), format!("{s:?}"));
        }
        assert_eq!(size_of::<Text>(), size_of::<String>());
    }

    #[test]
    fn order_equality_and_hashes_are_the_strings() {
        let long_z = "z".repeat(30);
        // Around the inline limit and the two words' seam, inline and shared side by side.
        let edges: Vec<String> = ["a", "b", "xa", "xb", "xx", "xxb"]
            .iter()
            .flat_map(|tail| {
                [INLINE - 8, INLINE - 7, INLINE - 2, INLINE - 1].map(|n| format!("{}{tail}", "x".repeat(n)))
            })
            .collect();
        let mut words = vec![
            "",
            "\0",
            "a",
            "a\0b",
            "ab",
            "ab\0",
            "ab\0\0",
            "abc",
            "b",
            "\u{ff}",
            "i-1",
            "i-10",
            "i-2",
            SHORT,
            LONG,
            "ü",
            long_z.as_str(),
        ];
        words.extend(edges.iter().map(String::as_str));
        let state = RandomState::new();
        for &a in &words {
            for &b in &words {
                assert_eq!(Text::from(a).cmp(&Text::from(b)), a.cmp(b), "{a:?} vs {b:?}");
                assert_eq!(Text::from(a) == Text::from(b), a == b);
            }
            // Not `str`'s hash (nothing looks a `Text` up by `&str`), but equal exactly when the
            // strings are: with the planning maps' hasher and with std's.
            for &b in &words {
                let fast = FastState::default();
                assert_eq!(fast.hash_one(Text::from(a)) == fast.hash_one(Text::from(b)), a == b, "{a:?} vs {b:?}");
                assert_eq!(state.hash_one(Text::from(a)) == state.hash_one(Text::from(b)), a == b, "{a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn serializes_as_a_plain_string() {
        for s in [SHORT, LONG] {
            let json = serde_json::to_string(&Text::from(s)).expect("serializes");
            assert_eq!(json, serde_json::to_string(s).expect("serializes"));
            let back: Text = serde_json::from_str(&json).expect("deserializes");
            assert_eq!(back.as_str(), s);
            let yaml: Text = serde_yaml::from_str(s).expect("deserializes");
            assert_eq!(yaml.as_str(), s);
        }
        assert!(serde_json::from_str::<Text>("1").is_err());
    }
}
