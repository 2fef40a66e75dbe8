//! The fenced code blocks of a Markdown page, each with its language and the heading it sits
//! under, for the tests that run the user docs' blocks.

#![allow(dead_code)]

/// One fenced block of a page.
#[derive(Debug)]
pub struct Block {
    /// The fence's info string (`sql`, `sh`, `text`, ...).
    pub language: String,
    /// The nearest heading above the block, as written (`### The views`).
    pub heading: String,
    /// The block's lines, each ended by a newline, without the fence's indent.
    pub text: String,
    /// How far the fence is indented: a block inside a list item is.
    indent: usize,
}

/// Every fenced block of `page`, in order. A heading inside a block (a shell comment) is
/// not a heading; a fence may be indented (a block inside a list item).
pub fn fenced_blocks(page: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut heading = String::new();
    let mut current: Option<Block> = None;
    for line in page.lines() {
        let trimmed = line.trim_start();
        match current.as_mut() {
            None => {
                if let Some(language) = trimmed.strip_prefix("```") {
                    current = Some(Block {
                        language: language.trim().to_owned(),
                        heading: heading.clone(),
                        text: String::new(),
                        indent: line.len() - trimmed.len(),
                    });
                } else if trimmed.starts_with('#') {
                    trimmed.clone_into(&mut heading);
                }
            }
            Some(_) if trimmed == "```" => blocks.extend(current.take()),
            Some(block) => {
                let indent = line.len() - line.trim_start_matches(' ').len();
                block.text.push_str(&line[indent.min(block.indent)..]);
                block.text.push('\n');
            }
        }
    }
    assert!(current.is_none(), "an unterminated fenced block");
    blocks
}
