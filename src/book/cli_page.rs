//! The command-line reference page, from the clap definitions: each subcommand with what it
//! does, its usage, and each argument with its value, default, choices and help.

use clap::{Arg, Command};

use super::GENERATED;
use super::markdown::{cell, table};

/// The page for `command` (the whole `imagemap` command).
#[must_use]
pub fn cli_page(command: &Command) -> String {
    let mut out = vec![
        GENERATED.to_string(),
        String::new(),
        "# Command line".to_string(),
        String::new(),
        format!(
            "`{}`: {}",
            command.get_name(),
            command
                .get_about()
                .map(ToString::to_string)
                .unwrap_or_default()
        ),
        String::new(),
        "Every command takes `-h` (a summary) and `--help` (this page's text).".to_string(),
    ];
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        section(&mut out, command.get_name(), sub);
    }
    out.join("\n") + "\n"
}

/// `## imagemap SUB`, its usage and arguments; then its own subcommands.
fn section(out: &mut Vec<String>, parent: &str, command: &Command) {
    let name = format!("{parent} {}", command.get_name());
    out.push(String::new());
    out.push(format!("## `{name}`"));
    out.push(String::new());
    if let Some(about) = command.get_long_about().or(command.get_about()) {
        out.push(about.to_string().trim().to_string());
        out.push(String::new());
    }
    let usage = command
        .clone()
        .bin_name(&name)
        .render_usage()
        .to_string()
        .trim_start_matches("Usage: ")
        .to_string();
    out.push(format!("```\n{usage}\n```"));
    let rows: Vec<Vec<String>> = command
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .map(row)
        .collect();
    if !rows.is_empty() {
        out.push(String::new());
        out.push(
            table(&["argument", "default", "values", "what it is"], &rows)
                .trim_end()
                .to_string(),
        );
    }
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        section(out, &name, sub);
    }
}

/// One argument's row.
fn row(arg: &Arg) -> Vec<String> {
    let value = arg
        .get_value_names()
        .map(|names| {
            names
                .iter()
                .map(|n| format!("<{n}>"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|_| arg.get_action().takes_values())
        .or_else(|| {
            arg.get_action()
                .takes_values()
                .then(|| format!("<{}>", arg.get_id().as_str().to_uppercase()))
        });
    let mut named = match (arg.get_short(), arg.get_long()) {
        (Some(s), Some(l)) => format!("`-{s}`, `--{l}`"),
        (None, Some(l)) => format!("`--{l}`"),
        (Some(s), None) => format!("`-{s}`"),
        (None, None) => String::new(),
    };
    if arg.is_positional() {
        named = format!("`{}`", value.clone().unwrap_or_default());
    } else if let Some(value) = &value {
        named = format!("{named} `{value}`");
    }
    if arg.is_required_set() {
        named.push_str(" (required)");
    }
    if matches!(arg.get_action(), clap::ArgAction::Append) {
        named.push_str(" (repeatable)");
    }
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|d| d.to_string_lossy().into_owned())
        .collect();
    let default = if defaults.is_empty() || !arg.get_action().takes_values() {
        String::new()
    } else {
        format!("`{}`", defaults.join(","))
    };
    // A flag (`--exit-code`) takes no value: its `true`/`false` are clap's, not the user's.
    let values: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| arg.get_action().takes_values() && !v.is_hide_set())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    let help = arg
        .get_long_help()
        .or(arg.get_help())
        .map(ToString::to_string)
        .unwrap_or_default();
    vec![named, default, values.join(", "), cell(&help)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_argument_shows_its_value_default_choices_and_help() {
        let command = Command::new("tool").subcommand(
            Command::new("go")
                .about("Goes somewhere")
                .arg(
                    Arg::new("namespace")
                        .short('n')
                        .long("namespace")
                        .value_name("NS")
                        .default_value("dev")
                        .help("Where | to go"),
                )
                .arg(
                    Arg::new("output")
                        .long("output")
                        .value_parser(["table", "json"])
                        .help("The format"),
                )
                .arg(
                    Arg::new("quiet")
                        .long("quiet")
                        .action(clap::ArgAction::SetTrue)
                        .help("Say less"),
                )
                .arg(Arg::new("hidden").long("hidden").hide(true)),
        );
        let page = cli_page(&command);
        assert!(page.starts_with(GENERATED), "{page}");
        assert!(page.contains("## `tool go`\n\nGoes somewhere\n"), "{page}");
        assert!(
            page.contains("| `-n`, `--namespace` `<NS>` | `dev` |  | Where \\| to go |"),
            "{page}"
        );
        assert!(
            page.contains("| `--output` `<OUTPUT>` |  | `table`, `json` | The format |"),
            "{page}"
        );
        assert!(page.contains("| `--quiet` |  |  | Say less |"), "{page}");
        assert!(!page.contains("hidden"), "{page}");
    }
}
