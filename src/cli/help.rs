//! The option list of `run --help`, rendered from the option table: one block per section, each
//! flag with its value placeholder and help text followed by its aliases, `[TG_*]` variables and
//! `(default)`, wrapped at [`WIDTH`] columns; a flag a reload cannot change says so
//! ([`RESTART_MARK`]).
//!
//! Owns only layout; every word about a flag comes from its table entry. The text around the
//! list (usage, exit status) belongs to `applet::run`.

use super::table::{Group, Kind, Opt, Reload, RUN_OPTIONS};

/// Said in the help of every flag a reload cannot change ([`Reload::Restart`]).
pub const RESTART_MARK: &str = "a reload keeps the old value: restart to change";

/// Column (0-based) where a flag's help text starts.
const TEXT_COL: usize = 32;
/// Longest line of the rendered list, in characters.
const WIDTH: usize = 98;

/// The option part of `run --help`: every section of the table in order, blank-line separated,
/// ending with the `-h, --help` line and a newline.
pub fn run_options_help() -> String {
    render(RUN_OPTIONS)
}

fn render(opts: &[Opt]) -> String {
    let mut out = String::new();
    for (i, group) in Group::ALL.into_iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(group.heading());
        out.push('\n');
        for o in opts.iter().filter(|o| o.group == group) {
            let (text, tail) = text(o);
            push_row(&mut out, &names(o), &text, &tail);
        }
        if let Some(note) = group.note() {
            push_row(&mut out, "", note, "");
        }
    }
    push_row(&mut out, "  -h, --help", "this text", "");
    out
}

/// `  -p, --port N` or `      --dc-ip DC:IP[:PORT]`.
fn names(o: &Opt) -> String {
    let short = o.short.map_or("    ".to_string(), |s| format!("{s}, "));
    let meta = if o.meta.is_empty() {
        String::new()
    } else {
        format!(" {}", o.meta)
    };
    format!("  {short}{}{meta}", o.long)
}

/// Help text with `; alias …`, and the tail `[TG_X or TG_Y] (default)` (`=1` for switches),
/// which wraps as one piece.
fn text(o: &Opt) -> (String, String) {
    let mut t = o.help.to_string();
    match o.aliases {
        [] => {}
        [one] => t.push_str(&format!("; alias {one}")),
        many => t.push_str(&format!("; aliases {}", many.join(", "))),
    }
    if o.reload == Reload::Restart {
        t.push_str(&format!("; {RESTART_MARK}"));
    }
    let on = match o.kind {
        Kind::Switch(_) | Kind::Count(_) => "=1",
        _ => "",
    };
    let env: Vec<String> = o.env.iter().map(|e| format!("{e}{on}")).collect();
    (t, format!("[{}] ({})", env.join(" or "), o.default))
}

/// Appends `names` and `text` then `tail`, word-wrapped into the text column; `tail` stays on
/// one line when it fits one. `names` too long to leave two spaces before the column gets a
/// line of its own; a note (empty `names`) starts at column 2.
fn push_row(out: &mut String, names: &str, text: &str, tail: &str) {
    let (indent, mut line) = if names.is_empty() {
        (2, " ".repeat(2))
    } else if names.chars().count() + 2 <= TEXT_COL {
        (TEXT_COL, format!("{names:<TEXT_COL$}"))
    } else {
        out.push_str(names);
        out.push('\n');
        (TEXT_COL, " ".repeat(TEXT_COL))
    };
    let mut words: Vec<&str> = text.split_whitespace().collect();
    if tail.chars().count() + indent <= WIDTH {
        words.extend((!tail.is_empty()).then_some(tail));
    } else {
        words.extend(tail.split_whitespace());
    }
    let mut fresh = true;
    for word in words {
        let len = line.chars().count();
        if !fresh && len + 1 + word.chars().count() > WIDTH {
            out.push_str(&line);
            out.push('\n');
            line = " ".repeat(indent);
            fresh = true;
        }
        if !fresh {
            line.push(' ');
        }
        line.push_str(word);
        fresh = false;
    }
    out.push_str(&line);
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_help_lists_every_flag_and_env_var() {
        let help = crate::applet::run::help();
        for o in RUN_OPTIONS {
            let names = [o.long].into_iter().chain(o.short);
            let names = names.chain(o.aliases.iter().copied());
            for name in names.chain(o.env.iter().copied()) {
                let found = help.match_indices(name).any(|(i, _)| {
                    let next = help[i + name.len()..].chars().next().unwrap_or(' ');
                    !(next.is_ascii_alphanumeric() || next == '-' || next == '_')
                });
                assert!(found, "{name} missing from run --help");
            }
        }
        for line in help.lines() {
            assert!(line.chars().count() <= 100, "help line too long: {line}");
        }
    }

    #[test]
    fn rows_wrap_into_the_text_column() {
        let mut out = String::new();
        push_row(
            &mut out,
            "  -p, --port N",
            &"word ".repeat(30),
            "[TG_PORT] (1443)",
        );
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines.len() > 1, "{out}");
        assert!(lines[0].starts_with("  -p, --port N "));
        assert_eq!(lines[0].find("word"), Some(TEXT_COL));
        for l in &lines[1..] {
            assert!(l.starts_with(&" ".repeat(TEXT_COL)) && !l[TEXT_COL..].starts_with(' '));
        }
        assert!(lines.iter().all(|l| l.chars().count() <= WIDTH));
        assert!(
            lines.iter().any(|l| l.ends_with(" [TG_PORT] (1443)")),
            "{out}"
        );

        let mut out = String::new();
        let long = "      --danger-accept-invalid-certs";
        push_row(&mut out, long, "short text", "");
        assert_eq!(out, format!("{long}\n{}short text\n", " ".repeat(TEXT_COL)));
    }

    #[test]
    fn a_row_shows_aliases_variables_and_the_default() {
        let opt = |long| RUN_OPTIONS.iter().find(|o| o.long == long).unwrap();
        let (t, tail) = text(opt("--tcp-connect-timeout"));
        assert!(t.ends_with("; alias --tcp-fallback-timeout"), "{t}");
        assert_eq!(
            tail,
            "[TG_TCP_CONNECT_TIMEOUT or TG_TCP_FALLBACK_TIMEOUT] (10s)"
        );
        assert_eq!(text(opt("--cf-priority")).1, "[TG_CF_PRIORITY=1] (off)");
        assert_eq!(names(opt("--port")), "  -p, --port N");
        assert_eq!(names(opt("--dc-ip")), "      --dc-ip DC:IP[:PORT]");
    }

    #[test]
    fn the_help_of_exactly_the_restart_flags_says_a_reload_keeps_them() {
        for o in RUN_OPTIONS {
            let restart = o.reload == Reload::Restart;
            assert_eq!(text(o).0.contains(RESTART_MARK), restart, "{}", o.long);
        }
    }
}
