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

/// Outside YAML that could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadYamlError {
    /// Nested deeper than any real input, refused before parsing.
    #[error("nested {depth} levels deep, more than the {MAX_FLOW_DEPTH} accepted")]
    TooDeep {
        /// The deepest nesting found.
        depth: usize,
    },
    /// Not YAML of the expected shape.
    #[error("{0}")]
    Invalid(#[from] serde_yaml::Error),
}

/// Parses outside YAML (a ConfigMap's data, a template a user wrote) behind the nesting guard.
pub(crate) fn read_yaml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, ReadYamlError> {
    let depth = flow_depth(text);
    if depth > MAX_FLOW_DEPTH {
        return Err(ReadYamlError::TooDeep { depth });
    }
    Ok(serde_yaml::from_str(text)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_past_the_limit_is_refused_before_parsing() {
        let deep = format!("a: {}", "[".repeat(100_000));
        let started = std::time::Instant::now();
        let err = read_yaml::<serde_yaml::Value>(&deep).unwrap_err();
        assert_eq!(err.to_string(), "nested 100000 levels deep, more than the 16 accepted");
        assert!(started.elapsed() < std::time::Duration::from_secs(1), "linear: {:?}", started.elapsed());
        assert!(read_yaml::<serde_yaml::Value>("a: [{b: [1]}]").is_ok());
    }

    #[test]
    fn a_stray_quote_hides_nothing() {
        assert_eq!(flow_depth("a: [{b: [1]}]"), 3);
        assert_eq!(flow_depth(&format!("a: it's\nb: {}", "[".repeat(50))), 50);
        assert_eq!(flow_depth(&format!("a: \"x\nb: {}", "[".repeat(50))), 50);
    }
}
