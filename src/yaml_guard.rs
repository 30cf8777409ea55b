//! A linear guard in front of serde_yaml for outside text: serde_yaml 0.9 spends quadratic time
//! on deeply nested flow collections (200 KB of `[` took 130 s), so nesting is measured first and
//! refused past what any real input needs.

/// The deepest `[`/`{` nesting accepted: CA's status uses two levels, Events and scenarios a few.
pub(crate) const MAX_FLOW_DEPTH: usize = 16;

/// The deepest bracket nesting, in one pass. Quotes are not honoured on purpose: a stray quote
/// in a plain scalar would otherwise hide the brackets after it from the count but not from the
/// parser. Real inputs never carry enough unbalanced brackets in strings to matter.
pub(crate) fn flow_depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for c in text.chars() {
        match c {
            '[' | '{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stray_quote_hides_nothing() {
        assert_eq!(flow_depth("a: [{b: [1]}]"), 3);
        assert_eq!(flow_depth(&format!("a: it's\nb: {}", "[".repeat(50))), 50);
        assert_eq!(flow_depth(&format!("a: \"x\nb: {}", "[".repeat(50))), 50);
    }
}
