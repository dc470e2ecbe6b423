//! The metrics reference page, from what the operator registers: each metric's name as
//! Prometheus scrapes it, its type, its labels and its help.

use super::GENERATED;
use super::markdown::{cell, table};

/// The page for the metrics in `exposition` (Prometheus text with every metric's `# HELP`
/// and `# TYPE`), with `labels`: each labelled metric's labels and the values they take.
pub fn metrics_page(
    exposition: &str,
    labels: &[(&str, &[(&str, &str)])],
) -> Result<String, String> {
    let mut rows = Vec::new();
    let mut documented = 0;
    let mut help = "";
    for line in exposition.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = rest.split_once(' ').map_or("", |(_, text)| text);
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest
                .split_once(' ')
                .ok_or_else(|| format!("a TYPE line without a type: {line:?}"))?;
            let scraped = match kind {
                "counter" => format!("`{name}_total`"),
                "histogram" => format!("`{name}_bucket`, `{name}_sum`, `{name}_count`"),
                _ => format!("`{name}`"),
            };
            let own: Vec<String> = labels
                .iter()
                .filter(|(metric, _)| {
                    *metric == name || metric.strip_suffix("_total") == Some(name)
                })
                .flat_map(|(_, labels)| labels.iter())
                .map(|(label, values)| format!("`{label}`: {values}"))
                .collect();
            documented += usize::from(!own.is_empty());
            rows.push(vec![
                scraped,
                kind.to_string(),
                cell(&own.join("; ")),
                cell(help),
            ]);
        }
    }
    if documented != labels.len() {
        return Err(format!(
            "{} labelled metrics documented, {documented} of them registered",
            labels.len()
        ));
    }
    Ok(format!(
        "{GENERATED}\n\n# Metrics\n\n`/metrics` on the health address (`--health-addr`) serves \
         these in the Prometheus text format. Labels take a bounded set of values; no label \
         names an object.\n\n{}",
        table(&["metric", "type", "labels", "what it counts"], &rows)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_metric_shows_its_scraped_name_type_labels_and_help() {
        let exposition = "# HELP x_requests Requests | by verb.\n# TYPE x_requests counter\n\
                          x_requests_total{verb=\"get\"} 1\n\
                          # HELP x_seconds Time taken.\n# TYPE x_seconds histogram\n\
                          # HELP x_rolls Rolls.\n# TYPE x_rolls gauge\nx_rolls 0\n# EOF\n";
        let page = metrics_page(
            exposition,
            &[("x_requests_total", &[("verb", "`get`, `list`")])],
        )
        .unwrap();
        assert!(
            page.contains(
                "| `x_requests_total` | counter | `verb`: `get`, `list` | Requests \\| by verb. |"
            ),
            "{page}"
        );
        assert!(page.contains("| `x_seconds_bucket`, `x_seconds_sum`, `x_seconds_count` | histogram |  | Time taken. |"), "{page}");
        assert!(page.contains("| `x_rolls` | gauge |  | Rolls. |"), "{page}");
        assert!(metrics_page(exposition, &[("x_gone_total", &[])]).is_err());
    }
}
