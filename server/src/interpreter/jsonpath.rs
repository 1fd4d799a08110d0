//! Kubernetes JSONPath templates (`k8s.io/client-go/util/jsonpath`), as `statePreservation`
//! rules use them: `{ .jobStatus.jobID }`, `{.availableReplicas}`, `{.a.b[0].c}`,
//! `{.items[*].name}`, evaluated against a status object with missing keys as errors, and
//! printed as Kubernetes prints them: strings raw, integers in full, other numbers as Go's
//! `%v` (`2.5`, `1e+06`), booleans `true`/`false`, objects and lists as compact JSON with
//! sorted keys, several results joined by one space. Text outside `{}` is copied.
//!
//! Supported inside `{}`: `$`, `@`, `.field`, `['field']`, `..field` (recursive descent),
//! `*` / `[*]`, `[n]` (negative counts from the end), `[start:end:step]`, unions `[0,2]` /
//! `['a','b']`, filters `[?(@.x == "y")]` (`==`, `!=`, `<`, `<=`, `>`, `>=`, or existence
//! `[?(@.x)]`) and quoted text `{"\n"}`. `range`/`end` are not supported. The `jsonpath-rust`
//! crate implements RFC 9535 rather than this template syntax, hence this small evaluator.
//!
//! [`eval_pieces`] keeps each path's results apart (state preservation needs exactly one),
//! and [`relaxed`] reads a brace-less `$.a.b` / `.a.b` as kubectl does.
//!
//! One deviation from Karmada, on purpose: Karmada decodes the status into float64 before
//! evaluating, so an integer above a million prints as `1.234567e+06`; here integers print as
//! written.

use std::fmt::Write as _;

use serde_json::Value;

/// Why a template could not be evaluated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JsonPathError {
    /// The template does not parse.
    #[error("invalid JSONPath template {template:?}: {reason}")]
    Parse {
        /// The whole template.
        template: String,
        /// What is wrong.
        reason: String,
    },
    /// A field is missing (missing keys are errors, as in Karmada's state extraction).
    #[error("{0} is not found")]
    NotFound(String),
    /// An index past the end of a list.
    #[error("array index out of bounds: index {index}, length {length}")]
    OutOfBounds {
        /// The index asked for.
        index: i64,
        /// The list's length.
        length: usize,
    },
    /// A list operation on something that is not a list.
    #[error("{0} is not array or slice")]
    NotArray(String),
    /// A slice that ends before it starts, or a step ≤ 0.
    #[error("invalid slice: {0}")]
    BadSlice(String),
    /// A filter comparing what cannot be compared.
    #[error("cannot compare {0}")]
    BadComparison(String),
    /// Template syntax Flotilla does not implement.
    #[error("{0} is not supported")]
    Unsupported(String),
}

/// Evaluates `template` against `data` and prints the result.
pub fn eval(template: &str, data: &Value) -> Result<String, JsonPathError> {
    let pieces = parse_template(template)?;
    let mut out = String::new();
    for piece in pieces {
        match piece {
            Piece::Text(t) => out.push_str(&t),
            Piece::Path(steps) => {
                let results = evaluate(&steps, data)?;
                let printed: Vec<String> = results.iter().map(|v| print(v)).collect();
                out.push_str(&printed.join(" "));
            }
        }
    }
    Ok(out)
}

/// One piece of an evaluated template: text copied as written, or the printed results of one
/// `{}` path action (none, one or several).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Evaluated {
    /// Text outside `{}` or a quoted `{"..."}`.
    Text(String),
    /// The printed results of one path action.
    Values(Vec<String>),
}

/// Evaluates `template` against `data` piece by piece, so that a caller that needs exactly
/// one value per path (state preservation) can tell "nothing" and "several" from one.
pub fn eval_pieces(template: &str, data: &Value) -> Result<Vec<Evaluated>, JsonPathError> {
    let pieces = parse_template(template)?;
    let mut out = Vec::with_capacity(pieces.len());
    for piece in pieces {
        out.push(match piece {
            Piece::Text(t) => Evaluated::Text(t),
            Piece::Path(steps) => {
                Evaluated::Values(evaluate(&steps, data)?.into_iter().map(print).collect())
            }
        });
    }
    Ok(out)
}

/// kubectl's relaxed form: a path written without braces (`$.a.b`, `.a.b`) is read as
/// `{$.a.b}` / `{.a.b}`; anything else (a template with `{}`, or plain text) is returned as
/// written.
pub fn relaxed(template: &str) -> std::borrow::Cow<'_, str> {
    let t = template.trim();
    if !t.contains('{') && (t.starts_with('$') || t.starts_with('.')) {
        std::borrow::Cow::Owned(format!("{{{t}}}"))
    } else {
        std::borrow::Cow::Borrowed(template)
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Text(String),
    Path(Vec<Step>),
}

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Root,
    Current,
    Field(String),
    Recursive,
    Wildcard,
    Slice {
        start: Option<i64>,
        end: Option<i64>,
        end_derived: bool,
        step: Option<i64>,
    },
    Union(Vec<Vec<Step>>),
    Filter(Box<Filter>),
}

#[derive(Debug, Clone, PartialEq)]
struct Filter {
    left: Vec<Step>,
    op: Option<(CmpOp, Value)>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

fn parse_error(template: &str, reason: impl Into<String>) -> JsonPathError {
    JsonPathError::Parse {
        template: template.to_string(),
        reason: reason.into(),
    }
}

fn parse_template(template: &str) -> Result<Vec<Piece>, JsonPathError> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut chars = template.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c != '{' {
            text.push(c);
            continue;
        }
        // Find the closing brace, skipping quoted text.
        let mut quote: Option<char> = None;
        let mut end = None;
        let mut escaped = false;
        for (j, d) in chars.by_ref() {
            match quote {
                Some(q) => {
                    if escaped {
                        escaped = false;
                    } else if d == '\\' {
                        escaped = true;
                    } else if d == q {
                        quote = None;
                    }
                }
                None if d == '"' || d == '\'' => quote = Some(d),
                None if d == '}' => {
                    end = Some(j);
                    break;
                }
                None => {}
            }
        }
        let Some(end) = end else {
            return Err(parse_error(template, format!("unclosed action at {i}")));
        };
        if !text.is_empty() {
            pieces.push(Piece::Text(std::mem::take(&mut text)));
        }
        let action = template[i + 1..end].trim();
        pieces.push(parse_action(template, action)?);
    }
    if !text.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(pieces)
}

fn parse_action(template: &str, action: &str) -> Result<Piece, JsonPathError> {
    if action.starts_with('"') {
        return parse_quoted(template, action).map(Piece::Text);
    }
    let word = action.split_whitespace().next().unwrap_or("");
    if word == "range" || word == "end" {
        return Err(JsonPathError::Unsupported(format!("{{{word}}}")));
    }
    if action.is_empty() {
        return Err(parse_error(template, "empty action {}"));
    }
    parse_path(template, action).map(Piece::Path)
}

/// A `"..."` or `'...'` literal with `\"`, `\\`, `\n`, `\t`, `\r` escapes.
fn parse_quoted(template: &str, s: &str) -> Result<String, JsonPathError> {
    let mut chars = s.chars();
    let quote = chars
        .next()
        .ok_or_else(|| parse_error(template, "empty string"))?;
    let mut out = String::new();
    let mut closed = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('r') => out.push('\r'),
                Some(other) => out.push(other),
                None => return Err(parse_error(template, "unterminated escape")),
            },
            c if c == quote => {
                closed = true;
                break;
            }
            c => out.push(c),
        }
    }
    if !closed || chars.next().is_some() {
        return Err(parse_error(template, format!("bad quoted text {s}")));
    }
    Ok(out)
}

fn is_name_char(c: char) -> bool {
    !matches!(
        c,
        '.' | '[' | ']' | ' ' | '\t' | '\n' | ',' | '(' | ')' | '=' | '!' | '<' | '>'
    )
}

fn parse_path(template: &str, path: &str) -> Result<Vec<Step>, JsonPathError> {
    let chars: Vec<char> = path.chars().collect();
    let mut steps = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '$' => {
                steps.push(Step::Root);
                i += 1;
            }
            '@' => {
                steps.push(Step::Current);
                i += 1;
            }
            '.' if chars.get(i + 1) == Some(&'.') => {
                steps.push(Step::Recursive);
                i += 2;
                if chars.get(i) == Some(&'*') {
                    steps.push(Step::Wildcard);
                    i += 1;
                } else if chars.get(i) != Some(&'[') {
                    let start = i;
                    while i < chars.len() && is_name_char(chars[i]) {
                        i += 1;
                    }
                    if start == i {
                        return Err(parse_error(template, "a name must follow .."));
                    }
                    steps.push(Step::Field(chars[start..i].iter().collect()));
                }
            }
            '.' => {
                i += 1;
                if chars.get(i) == Some(&'*') {
                    steps.push(Step::Wildcard);
                    i += 1;
                    continue;
                }
                let start = i;
                while i < chars.len() && is_name_char(chars[i]) {
                    i += 1;
                }
                if start == i {
                    // `{.}` is the current object; `.` before `[` is a no-op.
                    if i < chars.len() && chars[i] != '[' {
                        return Err(parse_error(template, format!("unexpected {:?}", chars[i])));
                    }
                    continue;
                }
                steps.push(Step::Field(chars[start..i].iter().collect()));
            }
            '[' => {
                let close = matching_bracket(&chars, i)
                    .ok_or_else(|| parse_error(template, "unclosed ["))?;
                let inner: String = chars[i + 1..close].iter().collect();
                steps.push(parse_bracket(template, inner.trim())?);
                i = close + 1;
            }
            c if i == 0 && is_name_char(c) => {
                // A path may start with a bare name (`{status.phase}`), as kubectl allows.
                let start = i;
                while i < chars.len() && is_name_char(chars[i]) {
                    i += 1;
                }
                steps.push(Step::Field(chars[start..i].iter().collect()));
            }
            c => {
                return Err(parse_error(
                    template,
                    format!("unexpected {c:?} in {path:?}"),
                ))
            }
        }
    }
    Ok(steps)
}

fn matching_bracket(chars: &[char], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    for (j, &c) in chars.iter().enumerate().skip(open) {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '\'' | '"' => quote = Some(c),
                '[' => depth += 1,
                ']' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(j);
                    }
                }
                _ => {}
            },
        }
    }
    None
}

fn split_top_level(s: &str, sep: char) -> Vec<String> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    for c in s.chars() {
        match quote {
            Some(q) => {
                if c == q {
                    quote = None;
                }
                cur.push(c);
            }
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                cur.push(c);
            }
            None if c == sep => parts.push(std::mem::take(&mut cur)),
            None => cur.push(c),
        }
    }
    parts.push(cur);
    parts
}

fn parse_int(template: &str, s: &str) -> Result<Option<i64>, JsonPathError> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    s.parse::<i64>()
        .map(Some)
        .map_err(|_| parse_error(template, format!("{s:?} is not an integer")))
}

fn parse_bracket(template: &str, inner: &str) -> Result<Step, JsonPathError> {
    if inner == "*" {
        return Ok(Step::Wildcard);
    }
    if let Some(filter) = inner.strip_prefix('?') {
        let body = filter
            .trim()
            .strip_prefix('(')
            .and_then(|f| f.strip_suffix(')'))
            .ok_or_else(|| parse_error(template, format!("bad filter [{inner}]")))?;
        return parse_filter(template, body.trim()).map(|f| Step::Filter(Box::new(f)));
    }
    let parts = split_top_level(inner, ',');
    if parts.len() > 1 {
        let mut items = Vec::new();
        for part in parts {
            items.push(vec![parse_bracket(template, part.trim())?]);
        }
        return Ok(Step::Union(items));
    }
    if inner.starts_with('\'') || inner.starts_with('"') {
        return parse_quoted(template, inner).map(Step::Field);
    }
    let bounds: Vec<&str> = inner.split(':').collect();
    match bounds.as_slice() {
        [index] => {
            let n = parse_int(template, index)?.ok_or_else(|| parse_error(template, "empty []"))?;
            Ok(Step::Slice {
                start: Some(n),
                end: Some(n + 1),
                end_derived: true,
                step: None,
            })
        }
        [start, end] | [start, end, ""] => Ok(Step::Slice {
            start: parse_int(template, start)?,
            end: parse_int(template, end)?,
            end_derived: false,
            step: None,
        }),
        [start, end, step] => Ok(Step::Slice {
            start: parse_int(template, start)?,
            end: parse_int(template, end)?,
            end_derived: false,
            step: parse_int(template, step)?,
        }),
        _ => Err(parse_error(template, format!("bad index [{inner}]"))),
    }
}

fn parse_filter(template: &str, body: &str) -> Result<Filter, JsonPathError> {
    const OPS: [(&str, CmpOp); 6] = [
        ("==", CmpOp::Eq),
        ("!=", CmpOp::Ne),
        ("<=", CmpOp::Le),
        (">=", CmpOp::Ge),
        ("<", CmpOp::Lt),
        (">", CmpOp::Gt),
    ];
    for (token, op) in OPS {
        if let Some((left, right)) = split_once_unquoted(body, token) {
            let left = parse_path(template, left.trim())?;
            let right = right.trim();
            let literal = if right.starts_with('"') || right.starts_with('\'') {
                Value::String(parse_quoted(template, right)?)
            } else if right == "true" || right == "false" {
                Value::Bool(right == "true")
            } else {
                serde_json::from_str::<Value>(right)
                    .ok()
                    .filter(Value::is_number)
                    .ok_or_else(|| parse_error(template, format!("bad filter value {right}")))?
            };
            return Ok(Filter {
                left,
                op: Some((op, literal)),
            });
        }
    }
    Ok(Filter {
        left: parse_path(template, body)?,
        op: None,
    })
}

fn split_once_unquoted<'a>(s: &'a str, token: &str) -> Option<(&'a str, &'a str)> {
    let mut quote: Option<char> = None;
    for (i, c) in s.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if s[i..].starts_with(token) => return Some((&s[..i], &s[i + token.len()..])),
            None => {}
        }
    }
    None
}

fn evaluate<'a>(steps: &[Step], data: &'a Value) -> Result<Vec<&'a Value>, JsonPathError> {
    let mut cur: Vec<&'a Value> = vec![data];
    for step in steps {
        cur = apply(step, &cur, data)?;
    }
    Ok(cur)
}

fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".to_string(),
        Value::Bool(_) => "bool".to_string(),
        Value::Number(_) => "number".to_string(),
        Value::String(_) => "string".to_string(),
        Value::Array(_) => "array".to_string(),
        Value::Object(_) => "map[string]interface {}".to_string(),
    }
}

/// The arrays of `input` in order, nulls skipped, for the steps that index into arrays
/// (slices, filters); anything else is a [`JsonPathError::NotArray`] where it stands.
fn arrays<'a, 'b>(
    input: &'b [&'a Value],
) -> impl Iterator<Item = Result<&'a [Value], JsonPathError>> + 'b {
    input
        .iter()
        .copied()
        .filter(|v| !v.is_null())
        .map(|v| match v {
            Value::Array(items) => Ok(items.as_slice()),
            other => Err(JsonPathError::NotArray(describe(other))),
        })
}

fn apply<'a>(
    step: &Step,
    input: &[&'a Value],
    root: &'a Value,
) -> Result<Vec<&'a Value>, JsonPathError> {
    match step {
        Step::Root => Ok(vec![root]),
        Step::Current => Ok(input.to_vec()),
        Step::Field(name) => {
            if input.is_empty() {
                return Ok(Vec::new());
            }
            let found: Vec<&Value> = input
                .iter()
                .filter_map(|v| v.as_object().and_then(|m| m.get(name)))
                .filter(|v| !v.is_null())
                .collect();
            if found.is_empty() {
                return Err(JsonPathError::NotFound(name.clone()));
            }
            Ok(found)
        }
        Step::Recursive => {
            let mut out = Vec::new();
            for v in input {
                descendants(v, &mut out);
            }
            Ok(out)
        }
        Step::Wildcard => Ok(input
            .iter()
            .flat_map(|v| match v {
                Value::Array(items) => items.iter().collect::<Vec<_>>(),
                Value::Object(map) => {
                    let mut keys: Vec<&String> = map.keys().collect();
                    keys.sort();
                    keys.into_iter().filter_map(|k| map.get(k)).collect()
                }
                _ => Vec::new(),
            })
            .collect()),
        Step::Slice {
            start,
            end,
            end_derived,
            step,
        } => {
            let mut out = Vec::new();
            for items in arrays(input) {
                slice(items?, *start, *end, *end_derived, *step, &mut out)?;
            }
            Ok(out)
        }
        Step::Union(parts) => {
            let mut out = Vec::new();
            for part in parts {
                let mut cur = input.to_vec();
                for step in part {
                    cur = apply(step, &cur, root)?;
                }
                out.extend(cur);
            }
            Ok(out)
        }
        Step::Filter(filter) => {
            let mut out = Vec::new();
            for items in arrays(input) {
                for item in items? {
                    let lefts = evaluate_relative(&filter.left, item, root);
                    match &filter.op {
                        None => {
                            if lefts.map(|l| !l.is_empty()).unwrap_or(false) {
                                out.push(item);
                            }
                        }
                        Some((op, right)) => {
                            let lefts = lefts?;
                            if lefts.len() > 1 {
                                return Err(JsonPathError::BadComparison(
                                    "more than one value on the left of a filter".to_string(),
                                ));
                            }
                            if let Some(left) = lefts.first() {
                                if compare(left, *op, right)? {
                                    out.push(item);
                                }
                            }
                        }
                    }
                }
            }
            Ok(out)
        }
    }
}

fn evaluate_relative<'a>(
    steps: &[Step],
    current: &'a Value,
    root: &'a Value,
) -> Result<Vec<&'a Value>, JsonPathError> {
    let mut cur: Vec<&'a Value> = vec![current];
    for step in steps {
        cur = apply(step, &cur, root)?;
    }
    Ok(cur)
}

fn descendants<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
    out.push(v);
    match v {
        Value::Array(items) => items.iter().for_each(|i| descendants(i, out)),
        Value::Object(map) => map.values().for_each(|i| descendants(i, out)),
        _ => {}
    }
}

fn slice<'a>(
    items: &'a [Value],
    start: Option<i64>,
    end: Option<i64>,
    end_derived: bool,
    step: Option<i64>,
    out: &mut Vec<&'a Value>,
) -> Result<(), JsonPathError> {
    let len = items.len() as i64;
    let mut s = start.unwrap_or(0);
    if s < 0 {
        s += len;
    }
    let mut e = end.unwrap_or(len);
    if e < 0 || (e == 0 && end_derived) {
        e += len;
    }
    if s == e {
        return Ok(());
    }
    if s >= len || s < 0 {
        return Err(JsonPathError::OutOfBounds {
            index: s,
            length: items.len(),
        });
    }
    if e > len || e < 0 {
        return Err(JsonPathError::OutOfBounds {
            index: e - 1,
            length: items.len(),
        });
    }
    if s > e {
        return Err(JsonPathError::BadSlice(format!(
            "starting index {s} is greater than ending index {e}"
        )));
    }
    let step = step.unwrap_or(1);
    if step <= 0 {
        return Err(JsonPathError::BadSlice("step must be > 0".to_string()));
    }
    let (s, e, step) = (s as usize, e as usize, step as usize);
    out.extend(items[s..e].iter().step_by(step));
    Ok(())
}

fn compare(left: &Value, op: CmpOp, right: &Value) -> Result<bool, JsonPathError> {
    use std::cmp::Ordering;
    let ordering = match (left, right) {
        (Value::Number(a), Value::Number(b)) => {
            let (a, b) = (
                a.as_f64().unwrap_or(f64::NAN),
                b.as_f64().unwrap_or(f64::NAN),
            );
            a.partial_cmp(&b)
        }
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        (Value::Bool(a), Value::Bool(b)) if matches!(op, CmpOp::Eq | CmpOp::Ne) => Some(a.cmp(b)),
        _ => match op {
            CmpOp::Eq => return Ok(false),
            CmpOp::Ne => return Ok(true),
            _ => {
                return Err(JsonPathError::BadComparison(format!(
                    "{} with {}",
                    describe(left),
                    describe(right)
                )))
            }
        },
    };
    let Some(ordering) = ordering else {
        return Ok(false);
    };
    Ok(match op {
        CmpOp::Eq => ordering == Ordering::Equal,
        CmpOp::Ne => ordering != Ordering::Equal,
        CmpOp::Lt => ordering == Ordering::Less,
        CmpOp::Le => ordering != Ordering::Greater,
        CmpOp::Gt => ordering == Ordering::Greater,
        CmpOp::Ge => ordering != Ordering::Less,
    })
}

/// One result as Kubernetes prints it.
fn print(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => number(n),
        Value::Bool(b) => b.to_string(),
        Value::Null => "null".to_string(),
        Value::Array(_) | Value::Object(_) => {
            let mut out = String::new();
            go_json(v, &mut out);
            out
        }
    }
}

fn number(n: &serde_json::Number) -> String {
    if n.is_i64() || n.is_u64() {
        return n.to_string();
    }
    go_float(n.as_f64().unwrap_or(f64::NAN))
}

/// Go's `%v` of a float64 (`%g` with the shortest digits that round-trip): exponent form
/// when the decimal exponent is below -4 or at least 6 (`1e+06`, `1.5e-07`), plain otherwise.
fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // Rust's `{:e}` gives the shortest round-trip digits: "1.2345e6", "-2.5e-5".
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if negative { "-" } else { "" };
    if !(-4..6).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let mut out = format!("{sign}{first}");
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
        return out;
    }
    let point = exp + 1; // digits before the decimal point
    let mut out = sign.to_string();
    if point <= 0 {
        out.push_str("0.");
        out.push_str(&"0".repeat((-point) as usize));
        out.push_str(&digits);
    } else if point as usize >= digits.len() {
        out.push_str(&digits);
        out.push_str(&"0".repeat(point as usize - digits.len()));
    } else {
        let (int, frac) = digits.split_at(point as usize);
        out.push_str(int);
        out.push('.');
        out.push_str(frac);
    }
    out
}

/// Compact JSON as Go's `encoding/json` writes it: keys sorted, `<`, `>`, `&` escaped.
fn go_json(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&go_string(k));
                out.push(':');
                if let Some(item) = map.get(k) {
                    go_json(item, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go_json(item, out);
            }
            out.push(']');
        }
        Value::String(s) => out.push_str(&go_string(s)),
        other => out.push_str(&other.to_string()),
    }
}

fn go_string(s: &str) -> String {
    serde_json::to_string(s)
        .unwrap_or_default()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn status() -> Value {
        json!({
            "jobStatus": {"jobID": "a1b2c3", "state": "RUNNING", "parallelism": 2},
            "availableReplicas": 2,
            "ratio": 2.5,
            "big": 1234567,
            "bigFloat": 1234567.0,
            "small": 0.0001,
            "tiny": 0.00001,
            "ready": true,
            "nothing": null,
            "a": {"b": [{"c": "first"}, {"c": "second"}, {"d": 1}]},
            "items": [
                {"name": "x", "weight": 1, "tags": ["p", "q"]},
                {"name": "y", "weight": 5},
                {"name": "z", "weight": 3}
            ],
            "labels": {"zone": "b", "app": "web"},
            "html": "<a&b>",
            "empty": []
        })
    }

    #[test]
    fn eval_table() {
        let rows: &[(&str, &str)] = &[
            ("{ .jobStatus.jobID }", "a1b2c3"),
            ("{.jobStatus.jobID}", "a1b2c3"),
            ("{$.jobStatus.jobID}", "a1b2c3"),
            ("{@.jobStatus.state}", "RUNNING"),
            ("{jobStatus.jobID}", "a1b2c3"),
            ("{.availableReplicas}", "2"),
            ("{.ratio}", "2.5"),
            ("{.big}", "1234567"),
            ("{.bigFloat}", "1.234567e+06"),
            ("{.small}", "0.0001"),
            ("{.tiny}", "1e-05"),
            ("{.ready}", "true"),
            ("{.a.b[0].c}", "first"),
            ("{.a.b[1].c}", "second"),
            ("{.a.b[-1].d}", "1"),
            ("{.a.b[*].c}", "first second"),
            ("{.a.b[0:2].c}", "first second"),
            ("{.a.b[0:3:2].c}", "first"),
            ("{.items[*].name}", "x y z"),
            ("{.items[0,2].name}", "x z"),
            ("{.items[?(@.weight > 2)].name}", "y z"),
            ("{.items[?(@.name == \"y\")].weight}", "5"),
            ("{.items[?(@.name != 'y')].name}", "x z"),
            ("{.items[?(@.tags)].name}", "x"),
            ("{.labels['zone']}", "b"),
            ("{.labels['zone','app']}", "b web"),
            ("{.labels.*}", "web b"),
            ("{..jobID}", "a1b2c3"),
            ("{.items[0].tags}", "[\"p\",\"q\"]"),
            ("{.labels}", "{\"app\":\"web\",\"zone\":\"b\"}"),
            ("{.html}", "<a&b>"),
            ("{.a.b[2]}", "{\"d\":1}"),
            (
                "id={.jobStatus.jobID}, state={.jobStatus.state}",
                "id=a1b2c3, state=RUNNING",
            ),
            ("plain text", "plain text"),
            ("{.jobStatus.jobID}{\"\\n\"}", "a1b2c3\n"),
            ("{.empty[*]}", ""),
            ("{.items[5:5]}", ""),
        ];
        for (template, want) in rows {
            assert_eq!(
                eval(template, &status()).as_deref(),
                Ok(*want),
                "{template}"
            );
        }
    }

    #[test]
    fn error_table() {
        let rows: &[(&str, JsonPathError)] = &[
            (
                "{.jobStatus.missing}",
                JsonPathError::NotFound("missing".to_string()),
            ),
            (
                "{.missing.jobID}",
                JsonPathError::NotFound("missing".to_string()),
            ),
            ("{.nothing}", JsonPathError::NotFound("nothing".to_string())),
            (
                "{.a.b[3]}",
                JsonPathError::OutOfBounds {
                    index: 3,
                    length: 3,
                },
            ),
            (
                "{.a.b[-4]}",
                JsonPathError::OutOfBounds {
                    index: -1,
                    length: 3,
                },
            ),
            (
                "{.jobStatus[0]}",
                JsonPathError::NotArray("map[string]interface {}".to_string()),
            ),
            ("{.a.b[*].zzz}", JsonPathError::NotFound("zzz".to_string())),
            (
                "{.items[?(@.missing == 1)].name}",
                JsonPathError::NotFound("missing".to_string()),
            ),
            (
                "{range .items[*]}{.name}{end}",
                JsonPathError::Unsupported("{range}".to_string()),
            ),
        ];
        for (template, want) in rows {
            assert_eq!(eval(template, &status()).as_ref(), Err(want), "{template}");
        }
        for bad in [
            "{.a",
            "{}",
            "{.a[}",
            "{.a[x]}",
            "{.a b}",
            "{.items[?(@.w > zz)]}",
        ] {
            assert!(
                matches!(eval(bad, &status()), Err(JsonPathError::Parse { .. })),
                "{bad}: {:?}",
                eval(bad, &status())
            );
        }
    }

    #[test]
    fn pieces_keep_the_count_of_each_paths_results() {
        let rows: &[(&str, Vec<Evaluated>)] = &[
            (
                "{.jobStatus.jobID}",
                vec![Evaluated::Values(vec!["a1b2c3".into()])],
            ),
            ("{.empty[*]}", vec![Evaluated::Values(vec![])]),
            (
                "{.items[*].name}",
                vec![Evaluated::Values(vec!["x".into(), "y".into(), "z".into()])],
            ),
            (
                "job-{.availableReplicas}",
                vec![
                    Evaluated::Text("job-".into()),
                    Evaluated::Values(vec!["2".into()]),
                ],
            ),
        ];
        for (template, want) in rows {
            assert_eq!(
                eval_pieces(template, &status()).as_ref(),
                Ok(want),
                "{template}"
            );
        }
        assert_eq!(
            eval_pieces("{.missing}", &status()),
            Err(JsonPathError::NotFound("missing".into()))
        );
    }

    #[test]
    fn relaxed_paths_without_braces() {
        let rows = [
            ("$.jobStatus.jobID", "{$.jobStatus.jobID}"),
            (".jobStatus.jobID", "{.jobStatus.jobID}"),
            ("  .a.b  ", "{.a.b}"),
            ("{ .jobStatus.jobID }", "{ .jobStatus.jobID }"),
            ("id-{.x}", "id-{.x}"),
            ("plain", "plain"),
        ];
        for (template, want) in rows {
            assert_eq!(relaxed(template), want, "{template}");
        }
        assert_eq!(
            eval(&relaxed("$.jobStatus.jobID"), &status()).as_deref(),
            Ok("a1b2c3")
        );
    }

    #[test]
    fn go_float_formatting() {
        let rows = [
            (2.5, "2.5"),
            (1.0e6, "1e+06"),
            (123456.0, "123456"),
            (1.5e-7, "1.5e-07"),
            (0.001, "0.001"),
            (-3.25, "-3.25"),
            (1.0e21, "1e+21"),
            (999999.5, "999999.5"),
            (-0.00012, "-0.00012"),
        ];
        for (f, want) in rows {
            assert_eq!(go_float(f), want, "{f}");
        }
    }
}
