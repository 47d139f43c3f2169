//! Every example in docs/workload-format.md parses: the language's own documentation cannot
//! show a workload that the parser refuses.

#[test]
fn every_example_in_the_format_doc_parses() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/workload-format.md");
    let text = std::fs::read_to_string(path).expect("docs/workload-format.md");
    let mut blocks = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        if line.starts_with("```") {
            match current.take() {
                Some(b) => blocks.push(b),
                None => current = Some((i + 1, String::new())),
            }
        } else if let Some((_, b)) = current.as_mut() {
            b.push_str(line);
            b.push('\n');
        }
    }
    assert!(blocks.len() >= 10, "the examples were not found: {} blocks", blocks.len());
    for (line, b) in blocks {
        if let Err(e) = workload::parse(&format!("docs/workload-format.md:{line}"), &b) {
            panic!("the example at docs/workload-format.md:{line} does not parse: {e}\n{b}");
        }
    }
}

/// The error example of the format doc ("Errors") is the parser's message, word for word: it
/// once appeared twice with two different lists of operations, neither the parser's.
#[test]
fn the_error_example_in_the_format_doc_is_the_real_message() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/workload-format.md");
    let text = std::fs::read_to_string(path).expect("docs/workload-format.md");
    let examples: Vec<&str> = text.lines().filter(|l| l.contains("unknown operation 'frobnicate'")).collect();
    assert_eq!(examples.len(), 1, "one example of the message: {examples:?}");
    let shown = examples[0].split('`').nth(1).expect("the message in backquotes");
    let real = workload::parse("w.thpw", "mmap a 1M\nmmap b 1M\nfrobnicate a\n").unwrap_err().to_string();
    assert_eq!(shown, real);
}
