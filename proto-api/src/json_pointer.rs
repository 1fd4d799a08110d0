//! JSON Pointer lookups (RFC 6901) that allocate nothing for the pointers the code spells out.
//!
//! `serde_json::Value::pointer` unescapes every token into a new `String` (two per token), so a
//! lookup such as `/metadata/name` costs four allocations. Server and agent look up fields of
//! every object they handle, many times per watch event and reconcile; [`JsonPointer::lookup`]
//! gives the same answers and borrows each token, copying one only when it holds an escape
//! (`~0`, `~1`).

use serde_json::Value;
use std::borrow::Cow;

/// Lookup by JSON Pointer, as `serde_json::Value::pointer` answers it.
pub trait JsonPointer {
    /// The value at `pointer` (`""` is the whole value; otherwise `/`-separated tokens, `~1`
    /// for `/` and `~0` for `~` inside a token, array elements by decimal index).
    fn lookup(&self, pointer: &str) -> Option<&Value>;
}

impl JsonPointer for Value {
    fn lookup(&self, pointer: &str) -> Option<&Value> {
        if pointer.is_empty() {
            return Some(self);
        }
        let tokens = pointer.strip_prefix('/')?;
        tokens.split('/').try_fold(self, |target, token| {
            let token = unescape(token);
            match target {
                Value::Object(map) => map.get(token.as_ref()),
                Value::Array(list) => parse_index(&token).and_then(|i| list.get(i)),
                _ => None,
            }
        })
    }
}

/// A token with its escapes undone (`~1` then `~0`, in RFC 6901's order).
fn unescape(token: &str) -> Cow<'_, str> {
    if token.contains('~') {
        Cow::Owned(token.replace("~1", "/").replace("~0", "~"))
    } else {
        Cow::Borrowed(token)
    }
}

/// An array index: decimal digits, no sign, no leading zero.
fn parse_index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lookups_answer_as_serde_json_does() {
        let doc = json!({
            "metadata": {"name": "web", "annotations": {"a.io/b": "slash", "t~x": "tilde",
                "~1": "literal"}},
            "items": [{"n": 0}, {"n": 1}],
            "": {"empty": true},
            "n": null,
        });
        let pointers = [
            "",
            "/",
            "/metadata",
            "/metadata/name",
            "/metadata/name/x",
            "/metadata/missing",
            "/metadata/annotations/a.io~1b",
            "/metadata/annotations/t~0x",
            "/metadata/annotations/~01",
            "/items/0/n",
            "/items/1",
            "/items/2",
            "/items/01",
            "/items/+1",
            "/items/-1",
            "/items/x",
            "//empty",
            "/n",
            "/n/x",
            "metadata",
            "/metadata/",
        ];
        for p in pointers {
            assert_eq!(doc.lookup(p), doc.pointer(p), "pointer {p:?}");
        }
    }

    proptest::proptest! {
        /// Any pointer made of tokens from a small alphabet (escapes, digits, signs, empty
        /// tokens included) answers as `serde_json`'s over a document built from the same.
        #[test]
        fn any_pointer_answers_as_serde_json_does(
            tokens in proptest::collection::vec("[ab0-2~/+]{0,3}", 0..4),
            raw in proptest::collection::vec("[ab0-2~+]{0,3}", 0..5),
        ) {
            let mut doc = json!({"a": [1, {"b": 2}], "~": {"/": 3}, "0": ["x"], "": {"": 4}});
            for t in &raw {
                doc[t.as_str()] = json!({"a": [t], "b": {"~0": t}});
            }
            let escaped: Vec<String> =
                tokens.iter().map(|t| t.replace('~', "~0").replace('/', "~1")).collect();
            for pointer in [
                format!("/{}", escaped.join("/")),
                format!("/{}", tokens.join("/")),
                tokens.join("/"),
            ] {
                proptest::prop_assert_eq!(doc.lookup(&pointer), doc.pointer(&pointer), "{}", pointer);
            }
        }
    }

    #[test]
    fn tokens_without_escapes_are_borrowed() {
        assert!(matches!(unescape("metadata"), Cow::Borrowed("metadata")));
        assert_eq!(unescape("a~1b~0c"), "a/b~c");
        // `~01` is `~1` as text, not `/`: `~1` is undone first.
        assert_eq!(unescape("~01"), "~1");
    }
}
