//! The `?fieldSelector=` query language: `path=value`, `path==value`, `path!=value`, joined by
//! commas, with `\,`, `\=` and `\\` escapes in values. Paths are dotted JSON paths such as
//! `metadata.name`, `spec.syncMode` or `involvedObject.name`; a missing field reads as the empty
//! string and numbers and booleans compare by their text. Which paths a kind supports is the
//! API's decision, not this module's.

use std::fmt;

use serde_json::Value;

/// `=` or `!=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldOperator {
    /// `path=value` or `path==value`.
    Equals,
    /// `path!=value`.
    NotEquals,
}

/// One term of a field selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldRequirement {
    /// Dotted path, e.g. `metadata.name`.
    pub path: String,
    /// Comparison.
    pub operator: FieldOperator,
    /// Value compared against the field's text.
    pub value: String,
}

/// A parsed field selector: every term must hold. Empty selects everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<FieldRequirement>);

/// A field selector that cannot be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid field selector {input:?}: {message}")]
pub struct FieldSelectorError {
    /// The whole selector text.
    pub input: String,
    /// What is wrong.
    pub message: String,
}

fn split_unescaped(s: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            parts.push(&s[start..i]);
            start = i + c.len_utf8();
        }
    }
    parts.push(&s[start..]);
    parts
}

fn unescape(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                Some(e) => return Err(format!("invalid escape sequence \\{e}")),
                None => return Err("trailing backslash".to_string()),
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The text of the field at `path` in `obj`: strings as they are, numbers and booleans as
/// written, missing or null fields as the empty string, other values as compact JSON.
pub fn field_text(obj: &Value, path: &str) -> String {
    let mut cur = obj;
    for seg in path.split('.') {
        match cur.get(seg) {
            Some(v) => cur = v,
            None => return String::new(),
        }
    }
    match cur {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        other => other.to_string(),
    }
}

impl FieldSelector {
    /// Parses the query form. Blank text selects everything.
    pub fn parse(input: &str) -> Result<Self, FieldSelectorError> {
        let err = |message: String| FieldSelectorError {
            input: input.to_string(),
            message,
        };
        if input.trim().is_empty() {
            return Ok(FieldSelector::default());
        }
        let mut reqs = Vec::new();
        for term in split_unescaped(input, ',') {
            let (path, operator, raw) = if let Some(i) = term.find("!=") {
                (&term[..i], FieldOperator::NotEquals, &term[i + 2..])
            } else if let Some(i) = term.find("==") {
                (&term[..i], FieldOperator::Equals, &term[i + 2..])
            } else if let Some(i) = term.find('=') {
                (&term[..i], FieldOperator::Equals, &term[i + 1..])
            } else {
                return Err(err(format!(
                    "invalid selector term {term:?}: expected path=value, path==value or \
                     path!=value"
                )));
            };
            let path = path.trim();
            if path.is_empty() || path.split('.').any(str::is_empty) {
                return Err(err(format!("invalid field path {path:?}")));
            }
            let value = unescape(raw).map_err(|m| err(format!("term {term:?}: {m}")))?;
            reqs.push(FieldRequirement {
                path: path.to_string(),
                operator,
                value,
            });
        }
        Ok(FieldSelector(reqs))
    }

    /// The terms, in the order written.
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.0
    }

    /// True when there are no terms.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The value an `=` term requires for `path`, if there is one (useful for index lookups
    /// such as `metadata.name=x`).
    pub fn required_value(&self, path: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|r| r.path == path && r.operator == FieldOperator::Equals)
            .map(|r| r.value.as_str())
    }

    /// True when `obj` satisfies every term.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|r| {
            let text = field_text(obj, &r.path);
            match r.operator {
                FieldOperator::Equals => text == r.value,
                FieldOperator::NotEquals => text != r.value,
            }
        })
    }
}

impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let op = match r.operator {
                FieldOperator::Equals => "=",
                FieldOperator::NotEquals => "!=",
            };
            write!(f, "{}{op}{}", r.path, escape(&r.value))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parse_and_match_table() {
        let obj = json!({
            "metadata": {"name": "member1", "namespace": "karmada-es-member1"},
            "spec": {"syncMode": "Push", "replicas": 3, "paused": false},
            "involvedObject": {"name": "nginx"},
            "count": 2
        });
        let cases = [
            ("", true),
            ("metadata.name=member1", true),
            ("metadata.name==member1", true),
            ("metadata.name!=member1", false),
            ("metadata.name=member2", false),
            (
                "metadata.namespace=karmada-es-member1,spec.syncMode=Push",
                true,
            ),
            (
                "metadata.namespace=karmada-es-member1,spec.syncMode=Pull",
                false,
            ),
            ("spec.syncMode!=Pull", true),
            ("involvedObject.name=nginx", true),
            ("spec.replicas=3", true),
            ("spec.paused=false", true),
            ("count=2", true),
            ("spec.missing=", true),
            ("spec.missing!=", false),
            ("spec.missing=x", false),
            ("spec.missing!=x", true),
            (" metadata.name = member1", false), // values are not trimmed
        ];
        for (input, want) in cases {
            let sel = FieldSelector::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(sel.matches(&obj), want, "{input}");
        }
    }

    #[test]
    fn escapes_round_trip() {
        let sel = FieldSelector::parse(r"metadata.name=a\,b\=c\\d,spec.x!=y").unwrap();
        assert_eq!(sel.requirements()[0].value, r"a,b=c\d");
        assert_eq!(sel.requirements()[1].operator, FieldOperator::NotEquals);
        assert_eq!(FieldSelector::parse(&sel.to_string()).unwrap(), sel);
        assert_eq!(sel.required_value("metadata.name"), Some(r"a,b=c\d"));
        assert_eq!(sel.required_value("spec.x"), None);
    }

    #[test]
    fn parse_errors_table() {
        for (input, want) in [
            ("metadata.name", "expected path=value"),
            ("=x", "invalid field path"),
            ("metadata..name=x", "invalid field path"),
            (r"metadata.name=a\q", "invalid escape"),
            (r"metadata.name=a\", "trailing backslash"),
            ("a=b,", "expected path=value"),
        ] {
            let err = FieldSelector::parse(input).expect_err(input).to_string();
            assert!(err.contains(want), "{input}: {err}");
        }
    }
}
