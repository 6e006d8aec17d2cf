//! `link --qr`: a QR code of one link drawn in the terminal with Unicode half blocks, two
//! module rows per text line, inside a 4-module quiet zone (ISO/IEC 18004 §6.3.8).
//!
//! Owns only the drawing ([`draw_matrix`], sans-IO: modules in, lines out). The encoding is
//! the `qrcode` crate's (error correction level L, the smallest code for a link), used only
//! here. Light modules are the printed blocks, so the code reads right on the usual light-on-
//! dark terminal (the quiet zone then shows as a light frame).

use qrcode::{Color, EcLevel, QrCode};

/// Light modules around the code on every side (the standard's minimum).
pub const QUIET_ZONE: usize = 4;

/// The QR code of `text` as terminal lines (each `width + 2 * QUIET_ZONE` characters).
/// Errors: `text` too long for any QR version (a link never is: a few hundred bytes at most).
pub fn draw(text: &str) -> Result<Vec<String>, String> {
    let code = QrCode::with_error_correction_level(text.as_bytes(), EcLevel::L)
        .map_err(|e| format!("cannot encode the link as a QR code: {e}"))?;
    let w = code.width();
    let dark: Vec<bool> = code
        .to_colors()
        .into_iter()
        .map(|c| c == Color::Dark)
        .collect();
    Ok(draw_matrix(w, &dark))
}

/// Draws a `w` x `w` module matrix (`dark[y * w + x]`, row-major) with the quiet zone: each
/// line covers two module rows, `█` both light, `▀` top light, `▄` bottom light, space both
/// dark. A missing module (short slice) counts as light.
pub fn draw_matrix(w: usize, dark: &[bool]) -> Vec<String> {
    let side = w + 2 * QUIET_ZONE;
    let light = |x: usize, y: usize| {
        if x < QUIET_ZONE || y < QUIET_ZONE || x >= QUIET_ZONE + w || y >= QUIET_ZONE + w {
            return true;
        }
        !dark
            .get((y - QUIET_ZONE) * w + (x - QUIET_ZONE))
            .copied()
            .unwrap_or(false)
    };
    (0..side)
        .step_by(2)
        .map(|y| {
            (0..side)
                .map(|x| match (light(x, y), y + 1 >= side || light(x, y + 1)) {
                    (true, true) => '█',
                    (true, false) => '▀',
                    (false, true) => '▄',
                    (false, false) => ' ',
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads a drawing back into "is this module light", (x, y) over the whole side.
    fn read_back(lines: &[String], side: usize) -> Vec<Vec<bool>> {
        let mut m = vec![vec![true; side]; side];
        for (row, line) in lines.iter().enumerate() {
            for (x, ch) in line.chars().enumerate() {
                let (top, bottom) = match ch {
                    '█' => (true, true),
                    '▀' => (true, false),
                    '▄' => (false, true),
                    ' ' => (false, false),
                    other => panic!("unexpected {other:?}"),
                };
                m[2 * row][x] = top;
                if 2 * row + 1 < side {
                    m[2 * row + 1][x] = bottom;
                }
            }
        }
        m
    }

    #[test]
    fn drawing_holds_the_crates_module_matrix_inside_a_quiet_zone() {
        let link = "https://t.me/proxy?server=192.168.1.1&port=1443&\
                    secret=dd0123456789abcdef0123456789abcdef";
        let code = QrCode::with_error_correction_level(link.as_bytes(), EcLevel::L).unwrap();
        let w = code.width();
        assert_eq!(w % 4, 1, "a QR side is 17 + 4 x version");
        let lines = draw(link).unwrap();
        let side = w + 2 * QUIET_ZONE;
        assert_eq!(lines.len(), side.div_ceil(2));
        assert!(lines.iter().all(|l| l.chars().count() == side));
        let m = read_back(&lines, side);
        for (y, row) in m.iter().enumerate() {
            for (x, &is_light) in row.iter().enumerate() {
                let inside = (QUIET_ZONE..QUIET_ZONE + w).contains(&x)
                    && (QUIET_ZONE..QUIET_ZONE + w).contains(&y);
                let want = if inside {
                    code[(x - QUIET_ZONE, y - QUIET_ZONE)] == Color::Light
                } else {
                    true
                };
                assert_eq!(is_light, want, "module ({x}, {y})");
            }
        }
        // The finder pattern's corner module is dark, the quiet zone light.
        assert!(!m[QUIET_ZONE][QUIET_ZONE] && m[0][0]);
    }

    #[test]
    fn tiny_matrix_draws_each_half_block() {
        // 1x1 dark module: the side is 9, the module sits at (4, 4), the top half of line 2.
        let lines = draw_matrix(1, &[true]);
        assert_eq!(lines.len(), 5);
        assert_eq!(lines[0], "█".repeat(9));
        assert_eq!(lines[2], format!("{}▄{}", "█".repeat(4), "█".repeat(4)));
        assert_eq!(
            lines[4],
            "█".repeat(9),
            "the odd last row: its missing half is light"
        );
    }
}
