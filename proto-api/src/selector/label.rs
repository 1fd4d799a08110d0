//! Label selectors. [`LabelSelector`] is the object form (`matchLabels`, `matchExpressions`)
//! used in policies; [`LabelRequirements::parse`] reads the query-string form used by
//! `?labelSelector=` (`a=b`, `a==b`, `a!=b`, `a`, `!a`, `a in (x,y)`, `a notin (x)`, joined by
//! commas). Both compile to [`LabelRequirements`], a conjunction that matches label maps.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::names;

/// Kubernetes `metav1.LabelSelector`. An empty selector matches everything; callers decide
/// what an absent (`None`) selector means.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LabelSelector {
    /// Each pair must be present with exactly that value.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Each expression must hold.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One `matchExpressions` entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelectorRequirement {
    /// Label key.
    pub key: String,
    /// How the key relates to the values.
    pub operator: LabelSelectorOperator,
    /// Values for `In`/`NotIn`; must be empty for `Exists`/`DoesNotExist`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// Operators of `matchExpressions`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LabelSelectorOperator {
    /// Value in the set.
    In,
    /// Absent, or value not in the set.
    NotIn,
    /// Key present.
    Exists,
    /// Key absent.
    DoesNotExist,
}

impl LabelSelector {
    /// Selector with only `matchLabels`.
    pub fn from_labels<'a>(labels: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        LabelSelector {
            match_labels: labels
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            match_expressions: Vec::new(),
        }
    }

    /// True when the selector has no terms (and so matches everything).
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

    /// Compiles the selector, checking keys, values and operator/value combinations.
    pub fn to_requirements(&self) -> Result<LabelRequirements, SelectorError> {
        let mut reqs = Vec::new();
        for (k, v) in &self.match_labels {
            reqs.push(Requirement::new(k, Operator::Equals, [v.as_str()])?);
        }
        for e in &self.match_expressions {
            let op = match e.operator {
                LabelSelectorOperator::In => Operator::In,
                LabelSelectorOperator::NotIn => Operator::NotIn,
                LabelSelectorOperator::Exists => Operator::Exists,
                LabelSelectorOperator::DoesNotExist => Operator::DoesNotExist,
            };
            reqs.push(Requirement::new(
                &e.key,
                op,
                e.values.iter().map(String::as_str),
            )?);
        }
        Ok(LabelRequirements(reqs))
    }

    /// True when `labels` satisfy every term. An invalid selector matches nothing (as Karmada's
    /// cluster affinity treats it).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.to_requirements().is_ok_and(|r| r.matches(labels))
    }
}

/// Operators of a compiled requirement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    /// `k=v` / `k==v`.
    Equals,
    /// `k!=v`: absent or different.
    NotEquals,
    /// `k in (..)`.
    In,
    /// `k notin (..)`: absent or not listed.
    NotIn,
    /// `k`.
    Exists,
    /// `!k`.
    DoesNotExist,
}

/// One compiled requirement: key, operator and value set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    operator: Operator,
    values: BTreeSet<String>,
}

/// A label selector that is not well formed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// The query text could not be parsed.
    #[error("unable to parse requirement: {message} (at position {position} of {input:?})")]
    Syntax {
        /// The whole selector text.
        input: String,
        /// Byte offset where the problem was found.
        position: usize,
        /// What was expected.
        message: String,
    },
    /// A key is not a valid label key.
    #[error("invalid label key {key:?}: {}", .reasons.join("; "))]
    InvalidKey {
        /// The key.
        key: String,
        /// Why.
        reasons: Vec<String>,
    },
    /// A value is not a valid label value.
    #[error("invalid label value {value:?} for key {key:?}: {}", .reasons.join("; "))]
    InvalidValue {
        /// The key.
        key: String,
        /// The value.
        value: String,
        /// Why.
        reasons: Vec<String>,
    },
    /// Values do not fit the operator.
    #[error("key {key:?}: {message}")]
    Values {
        /// The key.
        key: String,
        /// Why.
        message: String,
    },
}

impl Requirement {
    /// Builds a requirement, checking the key, the values and their count for the operator.
    pub fn new<'a>(
        key: &str,
        operator: Operator,
        values: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, SelectorError> {
        let reasons = names::qualified_name(key);
        if !reasons.is_empty() {
            return Err(SelectorError::InvalidKey {
                key: key.to_string(),
                reasons,
            });
        }
        let values: BTreeSet<String> = values.into_iter().map(str::to_string).collect();
        let bad = |message: &str| {
            Err(SelectorError::Values {
                key: key.to_string(),
                message: message.to_string(),
            })
        };
        match operator {
            Operator::Equals | Operator::NotEquals if values.len() != 1 => {
                return bad("exact-match compatibility requires one single value");
            }
            Operator::In | Operator::NotIn if values.is_empty() => {
                return bad("for 'in', 'notin' operators, values set can't be empty");
            }
            Operator::Exists | Operator::DoesNotExist if !values.is_empty() => {
                return bad("values set must be empty for exists and does not exist");
            }
            _ => {}
        }
        for v in &values {
            let reasons = names::label_value(v);
            if !reasons.is_empty() {
                return Err(SelectorError::InvalidValue {
                    key: key.to_string(),
                    value: v.clone(),
                    reasons,
                });
            }
        }
        Ok(Requirement {
            key: key.to_string(),
            operator,
            values,
        })
    }

    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> Operator {
        self.operator
    }

    /// The values, sorted.
    pub fn values(&self) -> &BTreeSet<String> {
        &self.values
    }

    /// True when `labels` satisfy this requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            Operator::Equals | Operator::In => value.is_some_and(|v| self.values.contains(v)),
            Operator::NotEquals | Operator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let joined = || self.values.iter().cloned().collect::<Vec<_>>().join(",");
        // A set of the empty value alone prints as `(,)`: `()` is refused when parsed back.
        let set = || {
            let j = joined();
            if j.is_empty() {
                ",".to_string()
            } else {
                j
            }
        };
        match self.operator {
            Operator::Equals => write!(f, "{}={}", self.key, joined()),
            Operator::NotEquals => write!(f, "{}!={}", self.key, joined()),
            Operator::In => write!(f, "{} in ({})", self.key, set()),
            Operator::NotIn => write!(f, "{} notin ({})", self.key, set()),
            Operator::Exists => f.write_str(&self.key),
            Operator::DoesNotExist => write!(f, "!{}", self.key),
        }
    }
}

/// A conjunction of requirements; empty matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelRequirements(Vec<Requirement>);

impl LabelRequirements {
    /// Requirements from already-built parts.
    pub fn new(requirements: Vec<Requirement>) -> Self {
        LabelRequirements(requirements)
    }

    /// Parses the `?labelSelector=` query form. Blank text selects everything.
    pub fn parse(input: &str) -> Result<Self, SelectorError> {
        Parser::new(input).parse()
    }

    /// The requirements, in the order written.
    pub fn requirements(&self) -> &[Requirement] {
        &self.0
    }

    /// True when there are no requirements.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// True when `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| r.matches(labels))
    }
}

impl fmt::Display for LabelRequirements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Ident(String),
    Comma,
    Eq,
    DoubleEq,
    NotEq,
    Bang,
    Open,
    Close,
    End,
}

fn is_special(c: char) -> bool {
    c.is_whitespace() || matches!(c, ',' | '=' | '!' | '(' | ')' | '<' | '>')
}

struct Parser<'a> {
    input: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn new(input: &'a str) -> Self {
        Parser { input, pos: 0 }
    }

    fn error<T>(&self, position: usize, message: &str) -> Result<T, SelectorError> {
        Err(SelectorError::Syntax {
            input: self.input.to_string(),
            position,
            message: message.to_string(),
        })
    }

    fn skip_ws(&mut self) {
        let rest = &self.input[self.pos..];
        self.pos += rest.len() - rest.trim_start().len();
    }

    /// Next token and the offset where it starts, without consuming it.
    fn peek(&mut self) -> Result<(Token, usize, usize), SelectorError> {
        self.skip_ws();
        let start = self.pos;
        let rest = &self.input[start..];
        let Some(c) = rest.chars().next() else {
            return Ok((Token::End, start, start));
        };
        let (tok, len) = match c {
            ',' => (Token::Comma, 1),
            '(' => (Token::Open, 1),
            ')' => (Token::Close, 1),
            '=' if rest.starts_with("==") => (Token::DoubleEq, 2),
            '=' => (Token::Eq, 1),
            '!' if rest.starts_with("!=") => (Token::NotEq, 2),
            '!' => (Token::Bang, 1),
            '<' | '>' => {
                return self.error(start, "operators '<' and '>' are not supported");
            }
            _ => {
                let len = rest.find(is_special).unwrap_or(rest.len());
                (Token::Ident(rest[..len].to_string()), len)
            }
        };
        Ok((tok, start, start + len))
    }

    fn next(&mut self) -> Result<(Token, usize), SelectorError> {
        let (tok, start, end) = self.peek()?;
        self.pos = end;
        Ok((tok, start))
    }

    fn parse(&mut self) -> Result<LabelRequirements, SelectorError> {
        let mut reqs = Vec::new();
        if self.peek()?.0 == Token::End {
            return Ok(LabelRequirements(reqs));
        }
        loop {
            reqs.push(self.requirement()?);
            match self.next()? {
                (Token::End, _) => return Ok(LabelRequirements(reqs)),
                (Token::Comma, _) => continue,
                (_, at) => return self.error(at, "expected ',' or end of selector"),
            }
        }
    }

    fn key(&mut self) -> Result<String, SelectorError> {
        match self.next()? {
            (Token::Ident(k), _) => Ok(k),
            (_, at) => self.error(at, "expected a label key"),
        }
    }

    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        if self.peek()?.0 == Token::Bang {
            self.next()?;
            let key = self.key()?;
            return Requirement::new(&key, Operator::DoesNotExist, []);
        }
        let key = self.key()?;
        let (tok, at, _) = self.peek()?;
        let op = match tok {
            Token::End | Token::Comma => return Requirement::new(&key, Operator::Exists, []),
            Token::Eq | Token::DoubleEq => Operator::Equals,
            Token::NotEq => Operator::NotEquals,
            Token::Ident(ref w) if w == "in" => Operator::In,
            Token::Ident(ref w) if w == "notin" => Operator::NotIn,
            _ => {
                return self.error(
                    at,
                    "expected one of '=', '==', '!=', 'in', 'notin', ',' or end of selector",
                )
            }
        };
        self.next()?;
        match op {
            Operator::In | Operator::NotIn => {
                let values = self.value_set()?;
                Requirement::new(&key, op, values.iter().map(String::as_str))
            }
            _ => {
                let value = match self.peek()?.0 {
                    Token::Ident(v) => {
                        self.next()?;
                        v
                    }
                    Token::End | Token::Comma => String::new(),
                    _ => return self.error(self.pos, "expected a label value"),
                };
                Requirement::new(&key, op, [value.as_str()])
            }
        }
    }

    fn value_set(&mut self) -> Result<Vec<String>, SelectorError> {
        match self.next()? {
            (Token::Open, _) => {}
            (_, at) => return self.error(at, "expected '(' after 'in' or 'notin'"),
        }
        let mut values = Vec::new();
        let mut expect_value = true;
        loop {
            match self.next()? {
                (Token::Ident(v), at) => {
                    if !expect_value {
                        return self.error(at, "expected ',' or ')' between values");
                    }
                    values.push(v);
                    expect_value = false;
                }
                (Token::Comma, _) => {
                    if expect_value {
                        values.push(String::new());
                    }
                    expect_value = true;
                }
                (Token::Close, at) => {
                    // `()` names no value at all: Kubernetes reads it as the empty value,
                    // Flotilla refuses it, since `a in ()` is nearly always a mistake. A
                    // trailing comma still stands for the empty value, as in Kubernetes.
                    if values.is_empty() {
                        return self.error(at, "values set can't be empty");
                    }
                    if expect_value {
                        values.push(String::new());
                    }
                    return Ok(values);
                }
                (_, at) => return self.error(at, "expected a value, ',' or ')'"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn query_parse_and_match_table() {
        let l = labels(&[("app", "nginx"), ("tier", "web"), ("empty", "")]);
        // (selector, canonical print, matches l)
        let cases = [
            ("", "", true),
            ("   ", "", true),
            ("app=nginx", "app=nginx", true),
            ("app==nginx", "app=nginx", true),
            ("app = nginx", "app=nginx", true),
            ("app!=nginx", "app!=nginx", false),
            ("app!=redis", "app!=redis", true),
            ("missing!=x", "missing!=x", true),
            ("app", "app", true),
            ("missing", "missing", false),
            ("!missing", "!missing", true),
            ("!app", "!app", false),
            ("app in (nginx,redis)", "app in (nginx,redis)", true),
            ("app in (redis)", "app in (redis)", false),
            ("app notin (redis)", "app notin (redis)", true),
            ("missing notin (x)", "missing notin (x)", true),
            ("app notin (nginx, redis)", "app notin (nginx,redis)", false),
            ("app=nginx,tier=web", "app=nginx,tier=web", true),
            ("app=nginx,tier=db", "app=nginx,tier=db", false),
            ("empty=", "empty=", true),
            ("app=", "app=", false),
            ("app in (nginx,)", "app in (,nginx)", true),
            ("empty in (,)", "empty in (,)", true),
            (
                "app.kubernetes.io/name in (a)",
                "app.kubernetes.io/name in (a)",
                false,
            ),
        ];
        for (input, printed, want) in cases {
            let r = LabelRequirements::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(r.to_string(), printed, "{input}");
            assert_eq!(r.matches(&l), want, "{input}");
            assert_eq!(LabelRequirements::parse(printed).unwrap(), r, "{input}");
        }
    }

    #[test]
    fn query_parse_errors_table() {
        let cases = [
            ("app=nginx,", "expected a label key"),
            (",app", "expected a label key"),
            ("app in nginx", "expected '('"),
            ("app in", "expected '('"),
            ("app in (a b)", "expected ',' or ')'"),
            ("app in (a", "expected a value"),
            ("app nginx", "expected one of"),
            ("app>1", "not supported"),
            ("app=a=b", "expected ',' or end"),
            ("-bad=x", "invalid label key"),
            ("app=-bad", "invalid label value"),
            ("!", "expected a label key"),
            ("a in ()", "values set can't be empty"),
            ("a notin ( )", "values set can't be empty"),
        ];
        for (input, want) in cases {
            let err = LabelRequirements::parse(input)
                .expect_err(input)
                .to_string();
            assert!(err.contains(want), "{input}: {err}");
        }
    }

    #[test]
    fn selector_object_matching_table() {
        let l = labels(&[("app", "nginx"), ("env", "prod")]);
        let expr = |key: &str, op, values: &[&str]| LabelSelectorRequirement {
            key: key.to_string(),
            operator: op,
            values: values.iter().map(|v| v.to_string()).collect(),
        };
        use LabelSelectorOperator::*;
        let cases = [
            (LabelSelector::default(), true),
            (LabelSelector::from_labels([("app", "nginx")]), true),
            (LabelSelector::from_labels([("app", "redis")]), false),
            (
                LabelSelector {
                    match_labels: BTreeMap::new(),
                    match_expressions: vec![expr("env", In, &["prod", "dev"])],
                },
                true,
            ),
            (
                LabelSelector {
                    match_labels: BTreeMap::new(),
                    match_expressions: vec![expr("env", NotIn, &["prod"])],
                },
                false,
            ),
            (
                LabelSelector {
                    match_labels: BTreeMap::new(),
                    match_expressions: vec![expr("team", DoesNotExist, &[])],
                },
                true,
            ),
            (
                LabelSelector {
                    match_labels: BTreeMap::new(),
                    match_expressions: vec![expr("app", Exists, &[])],
                },
                true,
            ),
            // Invalid selectors match nothing.
            (
                LabelSelector {
                    match_labels: BTreeMap::new(),
                    match_expressions: vec![expr("app", In, &[])],
                },
                false,
            ),
            (
                LabelSelector {
                    match_labels: BTreeMap::new(),
                    match_expressions: vec![expr("app", Exists, &["x"])],
                },
                false,
            ),
        ];
        for (i, (sel, want)) in cases.iter().enumerate() {
            assert_eq!(sel.matches(&l), *want, "case {i}: {sel:?}");
        }
    }

    #[test]
    fn selector_object_wire_form() {
        let sel: LabelSelector = serde_json::from_str(
            r#"{"matchLabels":{"app":"nginx"},"matchExpressions":[{"key":"env","operator":"In","values":["a"]}]}"#,
        )
        .unwrap();
        assert_eq!(
            serde_json::to_string(&sel).unwrap(),
            r#"{"matchLabels":{"app":"nginx"},"matchExpressions":[{"key":"env","operator":"In","values":["a"]}]}"#
        );
        assert_eq!(
            sel.to_requirements().unwrap().to_string(),
            "app=nginx,env in (a)"
        );
    }
}
