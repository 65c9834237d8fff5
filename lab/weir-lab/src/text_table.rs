//! The labs' text tables: a left-aligned first column, the others
//! right-aligned, two spaces apart.

/// `header` and `rows` as aligned lines, each ending in a newline.
pub fn aligned<S: AsRef<str>>(header: &[S], rows: &[Vec<String>]) -> String {
    let header: Vec<String> = header.iter().map(|h| h.as_ref().to_string()).collect();
    let mut width: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, cell) in width.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(&width).enumerate() {
            if i == 0 {
                s += &format!("{cell:<w$}");
            } else {
                s += &format!("  {cell:>w$}");
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(&header);
    for r in rows {
        out += &line(r);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn columns_align_and_trailing_space_goes() {
        let rows = vec![
            vec!["a".to_string(), "1".into()],
            vec!["bbb".into(), "22".into()],
        ];
        assert_eq!(
            super::aligned(&["x", "y"], &rows),
            "x     y\na     1\nbbb  22\n"
        );
    }
}
