//! How deeply a request body nests, measured in one linear pass before it is decoded.
//!
//! The YAML decoder (libyaml, under `serde_yaml_ng`) scans the whole document before anything
//! looks at its depth, and each token costs it time proportional to the flow nesting around it
//! (`[` and `{`): 100,000 levels in 200 KB took 19 s of CPU. The decoders themselves refuse
//! more than 128 levels, but only after that scan. [`check`] finds the flow nesting first, with
//! a lexer that follows libyaml's rules for what opens and closes a flow collection (quoted
//! scalars, plain scalars, comments, tags, anchors, block scalars), so a body nested deeper
//! than the limit is refused in time linear in its size. JSON is YAML's flow syntax and goes
//! through the same pass.
//!
//! Block nesting (indentation, `- - -`) is not measured here: libyaml scans it in linear time
//! and the decoders' own limit refuses it.

/// Deepest nesting a request body may have: the limit the JSON and YAML decoders apply while
/// decoding, applied here before they start.
pub const MAX_DEPTH: usize = 128;

/// A body nested deeper than the limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the body is nested deeper than {limit} levels (line {line}, column {column})")]
pub struct TooDeep {
    /// The limit that was passed.
    pub limit: usize,
    /// 1-based line of the collection that went past it.
    pub line: usize,
    /// 1-based column of that collection.
    pub column: usize,
}

fn is_break(b: u8) -> bool {
    b == b'\n' || b == b'\r'
}

fn is_blank(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

fn is_blankz(bytes: &[u8], i: usize) -> bool {
    bytes.get(i).is_none_or(|&b| is_blank(b) || is_break(b))
}

fn is_flow_indicator(b: u8) -> bool {
    matches!(b, b',' | b'[' | b']' | b'{' | b'}')
}

/// Refuses a JSON or YAML body whose flow collections nest deeper than `limit`.
pub fn check(bytes: &[u8], limit: usize) -> Result<(), TooDeep> {
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        let flow = depth > 0;
        let b = bytes[i];
        match b {
            b' ' | b'\t' | b'\r' | b'\n' => i += 1,
            b'#' => i = line_end(bytes, i),
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    let (line, column) = position(bytes, i);
                    return Err(TooDeep {
                        limit,
                        line,
                        column,
                    });
                }
                i += 1;
            }
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b',' => i += 1,
            b'\'' => i = single_quoted_end(bytes, i + 1),
            b'"' => i = double_quoted_end(bytes, i + 1),
            // In a flow collection `?` and `:` are indicators wherever a token starts.
            b'?' | b':' if flow || is_blankz(bytes, i + 1) => i += 1,
            b'-' if is_blankz(bytes, i + 1) => i += 1,
            b'&' | b'*' => {
                i += 1;
                while bytes
                    .get(i)
                    .is_some_and(|&c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
                {
                    i += 1;
                }
            }
            b'!' => i = tag_end(bytes, i + 1),
            b'|' | b'>' if !flow => match block_scalar_end(bytes, i) {
                Some(end) => i = end,
                None => i = block_plain_end(bytes, i),
            },
            _ if flow => i = plain_end(bytes, i, true),
            _ => i = block_plain_end(bytes, i),
        }
    }
    Ok(())
}

/// 1-based line and column of a byte offset.
fn position(bytes: &[u8], at: usize) -> (usize, usize) {
    let before = &bytes[..at];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let column = at
        - before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |p| p + 1)
        + 1;
    (line, column)
}

fn line_end(bytes: &[u8], mut i: usize) -> usize {
    while i < bytes.len() && bytes[i] != b'\n' {
        i += 1;
    }
    i
}

fn line_start(bytes: &[u8], i: usize) -> usize {
    bytes[..i]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |p| p + 1)
}

/// After the closing `'` (a doubled `''` is a quote inside).
fn single_quoted_end(bytes: &[u8], mut i: usize) -> usize {
    while i < bytes.len() {
        if bytes[i] == b'\'' {
            if bytes.get(i + 1) == Some(&b'\'') {
                i += 2;
                continue;
            }
            return i + 1;
        }
        i += 1;
    }
    i
}

/// After the closing `"` (a backslash escapes the next byte).
fn double_quoted_end(bytes: &[u8], mut i: usize) -> usize {
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    bytes.len()
}

/// After a tag: `!<uri>` runs to `>`, other tags to a blank or a flow indicator.
fn tag_end(bytes: &[u8], mut i: usize) -> usize {
    if bytes.get(i) == Some(&b'<') {
        while i < bytes.len() && bytes[i] != b'>' && !is_blankz(bytes, i) {
            i += 1;
        }
        return (i + 1).min(bytes.len());
    }
    while i < bytes.len() && !is_blankz(bytes, i) && !is_flow_indicator(bytes[i]) {
        i += 1;
    }
    i
}

/// Where a plain scalar starting at `i` ends. Blanks inside it are part of it; it ends at
/// `: ` or ` #`, at a flow indicator inside a flow collection, and at the end of the line
/// outside one (inside one it goes on over line breaks, as libyaml's does).
fn plain_end(bytes: &[u8], mut i: usize, flow: bool) -> usize {
    let n = bytes.len();
    loop {
        while i < n && !is_blankz(bytes, i) {
            let b = bytes[i];
            if b == b':' && (is_blankz(bytes, i + 1) || (flow && is_flow_indicator(bytes[i + 1]))) {
                return i;
            }
            if flow && is_flow_indicator(b) {
                return i;
            }
            i += 1;
        }
        let mut j = i;
        while j < n && (is_blank(bytes[j]) || (flow && is_break(bytes[j]))) {
            j += 1;
        }
        if j >= n || bytes[j] == b'#' || is_break(bytes[j]) {
            return j;
        }
        if flow && j > i && bytes[j - 1] == b'\n' && document_marker(bytes, j) {
            return j;
        }
        i = j;
    }
}

fn document_marker(bytes: &[u8], i: usize) -> bool {
    (bytes[i..].starts_with(b"---") || bytes[i..].starts_with(b"...")) && is_blankz(bytes, i + 3)
}

/// The indentation of the block collection a scalar starting at `i` belongs to: the column of
/// the key on its line, or of the `-` / `?` right before it; none at the top level.
fn parent_indent(bytes: &[u8], i: usize) -> Option<usize> {
    let start = line_start(bytes, i);
    let mut col = start;
    while col < i && is_blank(bytes[col]) {
        col += 1;
    }
    let mut parent: Option<usize> = None;
    while col < i && matches!(bytes[col], b'-' | b'?') && is_blankz(bytes, col + 1) {
        parent = Some(col - start);
        col += 1;
        while col < i && is_blank(bytes[col]) {
            col += 1;
        }
    }
    if col < i {
        parent = Some(col - start);
    }
    parent
}

/// Outside flow collections, where the plain scalar starting at `i` ends: like libyaml's, it
/// goes on over line breaks onto lines indented deeper than its collection (so a quote at
/// the start of such a line is text, not a quoted scalar).
fn block_plain_end(bytes: &[u8], i: usize) -> usize {
    let mut end = plain_end(bytes, i, false);
    if end >= bytes.len() || !is_break(bytes[end]) {
        return end;
    }
    let parent = parent_indent(bytes, i);
    loop {
        // `end` is at the line break that ends the scalar so far.
        let next = line_end(bytes, end) + 1;
        let mut k = next;
        while k < bytes.len() && is_blank(bytes[k]) {
            k += 1;
        }
        if k >= bytes.len() {
            return bytes.len();
        }
        if is_break(bytes[k]) {
            // An empty line: part of the scalar if a continuation follows.
            end = k;
            continue;
        }
        let indent = k - next;
        let continues = parent.is_none_or(|p| indent > p)
            && bytes[k] != b'#'
            && !(indent == 0 && document_marker(bytes, k));
        if !continues {
            return next;
        }
        end = plain_end(bytes, k, false);
        if end >= bytes.len() || !is_break(bytes[end]) {
            return end;
        }
    }
}

/// If a block scalar header (`|` or `>`, optional indentation and chomping indicators, an
/// optional comment) starts at `i`, the offset after its content; its content lines are text.
fn block_scalar_end(bytes: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    let mut explicit: Option<usize> = None;
    for _ in 0..2 {
        match bytes.get(j) {
            Some(b'+' | b'-') => j += 1,
            Some(d @ b'1'..=b'9') => {
                explicit = Some(usize::from(d - b'0'));
                j += 1;
            }
            _ => break,
        }
    }
    while bytes.get(j).is_some_and(|&b| is_blank(b)) {
        j += 1;
    }
    match bytes.get(j) {
        None => return Some(j),
        Some(b'#') if j > i + 1 && is_blank(bytes[j - 1]) => j = line_end(bytes, j),
        Some(b) if is_break(*b) => {}
        Some(_) => return None,
    }
    let parent = parent_indent(bytes, i);
    let min_indent = parent.map_or(0, |p| p + 1).max(1);
    let mut indent = explicit.map(|d| parent.map_or(d, |p| p + d));
    // Content: empty lines, and lines indented at least as far as the first non-empty one.
    let mut at = line_end(bytes, j);
    while at < bytes.len() {
        let next = at + 1;
        let mut k = next;
        while k < bytes.len() && bytes[k] == b' ' {
            k += 1;
        }
        let spaces = k - next;
        let empty = k >= bytes.len()
            || is_break(bytes[k])
            || bytes[k] == b'\t' && {
                let e = line_end(bytes, k);
                bytes[k..e].iter().all(|&b| is_blank(b) || b == b'\r')
            };
        if !empty {
            let needed = *indent.get_or_insert(spaces.max(min_indent));
            if spaces < needed {
                return Some(next);
            }
        }
        at = line_end(bytes, next);
    }
    Some(bytes.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth_ok(doc: &str, limit: usize) -> bool {
        check(doc.as_bytes(), limit).is_ok()
    }

    #[test]
    fn counts_flow_nesting_of_json_and_yaml() {
        let table: &[(&str, usize, bool)] = &[
            ("{\"a\":[1,{\"b\":[]}]}", 4, true),
            ("{\"a\":[1,{\"b\":[]}]}", 3, false),
            ("a: [1, [2, [3]]]\n", 3, true),
            ("a: [1, [2, [3]]]\n", 2, false),
            ("[[[]]] [[[]]]", 3, true),
            // Brackets that are text do not count...
            ("a: \"[[[[\"\nb: '[[[['\nc: x[[[[\n# [[[[\n", 1, true),
            ("a: |\n  [[[[\n  {{{{\nb: 1\n", 1, true),
            ("- >-\n   [[[[\n- 2\n", 0, true),
            ("a: !tag [[1]]\n", 2, true),
            // ... nor can text hide a bracket that is not.
            ("a: |\n  x\nb: [[[1]]]\n", 2, false),
            ("  - k: |\n      x\n    o: [[[1]]]\n", 2, false),
            ("a: [\"]]]\", [[1]]]\n", 2, false),
            ("a: ['it''s ]]', [[1]]]\n", 2, false),
            ("[a 'b, [[1]]]\n", 2, false),
            ("[a #]]]\n [[1]]]\n", 2, false),
            ("[\"x\":\"]]]\", [[1]]]", 2, false),
            ("[!a, [[1]]]", 2, false),
            ("[&a, [[1]]]", 2, false),
            ("[*a, [[1]]]", 2, false),
            // A quote that starts a continuation line of a plain scalar is text.
            ("a: x\n 'y\nb: [[[1]]]\n", 2, false),
            ("- x\n\n  \"y\nb: [[[1]]]\n", 2, false),
            ("x\n'y\n[[[1]]]\n", 2, true),
            ("a: x\n'y'\nb: [[[1]]]\n", 2, false),
        ];
        for (doc, limit, want) in table {
            assert_eq!(depth_ok(doc, *limit), *want, "{doc:?} with limit {limit}");
        }
    }

    #[test]
    fn refuses_deep_bodies_in_linear_time() {
        let n = 200_000;
        for doc in [
            format!("{}{}", "[".repeat(n), "]".repeat(n)),
            format!("a: {}1{}\n", "{\"k\": ".repeat(n), "}".repeat(n)),
        ] {
            let err = check(doc.as_bytes(), MAX_DEPTH).unwrap_err();
            assert_eq!(err.limit, MAX_DEPTH);
            assert_eq!(err.line, 1);
        }
    }

    #[test]
    fn reports_where_the_limit_was_passed() {
        let err = check(b"a:\n  b: [[[1]]]\n", 2).unwrap_err();
        assert_eq!((err.line, err.column), (2, 8));
        assert_eq!(
            err.to_string(),
            "the body is nested deeper than 2 levels (line 2, column 8)"
        );
    }
}
