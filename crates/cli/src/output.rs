//! Writing results: plain tables for people, JSON for programs. Cells are expected to be
//! escaped already (see [`crate::escape`]); this module only lays them out.

use std::io::Write;

use serde::Serialize;

use crate::error::{CliError, Result};
use crate::error_code::ErrorCode;

/// A table with a header row, printed with columns padded to their widest cell.
#[derive(Debug)]
pub struct Table {
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with these column names.
    pub fn new(header: &[&'static str]) -> Self {
        Self {
            header: header.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Appends a row; missing cells print empty.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text, one line per row, ending in a newline.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self
            .header
            .iter()
            .map(|name| name.chars().count())
            .collect();
        for row in &self.rows {
            for (index, cell) in row.iter().enumerate() {
                if let Some(width) = widths.get_mut(index) {
                    *width = (*width).max(cell.chars().count());
                }
            }
        }
        let mut text = String::new();
        let header: Vec<String> = self.header.iter().map(|name| (*name).to_owned()).collect();
        push_line(&mut text, &header, &widths);
        for row in &self.rows {
            push_line(&mut text, row, &widths);
        }
        text
    }
}

fn push_line(text: &mut String, cells: &[String], widths: &[usize]) {
    let mut line = String::new();
    for (index, width) in widths.iter().enumerate() {
        let cell = cells.get(index).map_or("", String::as_str);
        if index + 1 == widths.len() {
            line.push_str(cell);
        } else {
            line.push_str(cell);
            let pad = width.saturating_sub(cell.chars().count()) + 2;
            line.extend(std::iter::repeat_n(' ', pad));
        }
    }
    text.push_str(line.trim_end());
    text.push('\n');
}

/// Prints `text` to standard output. A closed pipe (`durably ls | head`) is not an error.
pub fn print(text: &str) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => Err(CliError::new(
            ErrorCode::IoError,
            format!("cannot write to standard output: {error}"),
        )),
        _ => Ok(()),
    }
}

/// Prints `value` as pretty JSON and a newline.
pub fn print_json(value: &impl Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(|error| {
        CliError::new(ErrorCode::Internal, format!("cannot render JSON: {error}"))
    })?;
    print(&format!("{text}\n"))
}

/// Prints a list the way every listing command does: `rows` as a JSON array with `json`, else
/// `empty` alone on a line when there are no rows, else a table of `header` with one line of
/// `cells(row)` per row.
///
/// # Errors
/// Standard output cannot be written, or a row cannot be rendered as JSON.
pub fn print_rows<T: Serialize>(
    rows: &[T],
    json: bool,
    empty: &str,
    header: &[&'static str],
    cells: impl Fn(&T) -> Vec<String>,
) -> Result<()> {
    if json {
        return print_json(&rows);
    }
    if rows.is_empty() {
        return print(&format!("{empty}\n"));
    }
    let mut table = Table::new(header);
    for row in rows {
        table.row(cells(row));
    }
    print(&table.render())
}

/// An optional cell: the text, or `-`.
pub fn or_dash(value: Option<&str>) -> String {
    value.map_or_else(|| "-".to_owned(), str::to_owned)
}

#[cfg(test)]
mod tests {
    //! What these prove: columns line up whatever the cell widths, and trailing blanks are cut.
    use super::*;

    #[test]
    fn columns_are_padded_to_the_widest_cell() {
        let mut table = Table::new(&["ID", "STATUS"]);
        table.row(vec!["a".to_owned(), "completed".to_owned()]);
        table.row(vec!["long-id".to_owned(), String::new()]);
        assert_eq!(
            table.render(),
            "ID       STATUS\na        completed\nlong-id\n"
        );
    }
}
