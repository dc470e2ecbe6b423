//! The API reference page, from the CRD schemas (`crds/imagemap.dev.yaml`): each kind with
//! its names and `kubectl get` columns, then each field of its spec and status with its type,
//! default, validation and description.

use serde_json::Value;

use super::GENERATED;
use super::markdown::{cell, table};

/// The page for the CustomResourceDefinitions in `crds_yaml` (YAML documents).
pub fn api_page(crds_yaml: &str) -> Result<String, String> {
    let mut out = vec![GENERATED.to_string(), String::new(), "# API".to_string()];
    for document in serde_yaml_ng::Deserializer::from_str(crds_yaml) {
        let crd: Value = serde::Deserialize::deserialize(document)
            .map_err(|e| format!("the CRDs are not YAML: {e}"))?;
        if crd.is_null() {
            continue;
        }
        kind_section(&mut out, &crd)?;
    }
    Ok(out.join("\n") + "\n")
}

/// `## Kind`: its group, version, scope and names; its columns; its fields.
fn kind_section(out: &mut Vec<String>, crd: &Value) -> Result<(), String> {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let kind = names["kind"]
        .as_str()
        .ok_or("a CRD names no kind (spec.names.kind)")?;
    let group = spec["group"].as_str().unwrap_or_default();
    let listed = |v: &Value| -> String {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(|s| format!("`{s}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default()
    };
    for version in spec["versions"].as_array().into_iter().flatten() {
        let name = version["name"].as_str().unwrap_or_default();
        out.push(String::new());
        out.push(format!("## {kind}"));
        out.push(String::new());
        out.push(format!(
            "`{group}/{name}`, {} (`{}`; short names: {}; categories: {})",
            spec["scope"].as_str().unwrap_or_default().to_lowercase(),
            names["plural"].as_str().unwrap_or_default(),
            or_none(&listed(&names["shortNames"])),
            or_none(&listed(&names["categories"])),
        ));
        let schema = &version["schema"]["openAPIV3Schema"];
        if let Some(about) = schema["description"].as_str() {
            out.push(String::new());
            out.push(cell(about));
        }
        let columns: Vec<Vec<String>> = version["additionalPrinterColumns"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                vec![
                    c["name"].as_str().unwrap_or_default().to_string(),
                    format!("`{}`", c["jsonPath"].as_str().unwrap_or_default()),
                    cell(c["description"].as_str().unwrap_or_default()),
                ]
            })
            .collect();
        if !columns.is_empty() {
            out.push(String::new());
            out.push(format!(
                "`kubectl get {}` shows:",
                names["plural"].as_str().unwrap_or_default()
            ));
            out.push(String::new());
            out.push(
                table(&["column", "from", "what it is"], &columns)
                    .trim_end()
                    .to_string(),
            );
        }
        for part in ["spec", "status"] {
            let mut rows = Vec::new();
            let field = &schema["properties"][part];
            if field.is_null() {
                continue;
            }
            fields(part, field, &mut rows);
            out.push(String::new());
            out.push(format!("### {kind} `{part}`"));
            out.push(String::new());
            out.push(
                table(
                    &["field", "type", "default", "validation", "description"],
                    &rows,
                )
                .trim_end()
                .to_string(),
            );
        }
    }
    Ok(())
}

fn or_none(listed: &str) -> &str {
    if listed.is_empty() { "none" } else { listed }
}

/// The rows of the fields under `schema` (at `path`), depth first, in the schema's order.
fn fields(path: &str, schema: &Value, rows: &mut Vec<Vec<String>>) {
    let Some(properties) = schema["properties"].as_object() else {
        return;
    };
    let required: Vec<&str> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    for (name, field) in properties {
        let at = format!("{path}.{name}");
        rows.push(vec![
            format!("`{at}`"),
            type_of(field),
            field
                .get("default")
                .map(|d| format!("`{d}`"))
                .unwrap_or_default(),
            cell(&validation(field, required.contains(&name.as_str()))),
            cell(field["description"].as_str().unwrap_or_default()),
        ]);
        let (inner, inner_path) = element(field, &at);
        fields(&inner_path, inner, rows);
    }
}

/// What a field's children hang under: its items' (`path[]`), its map values'
/// (`path.KEY`), or its own properties.
fn element<'a>(field: &'a Value, path: &str) -> (&'a Value, String) {
    if field["type"] == "array" {
        element(&field["items"], &format!("{path}[]"))
    } else if field["additionalProperties"].is_object() {
        (&field["additionalProperties"], format!("{path}.KEY"))
    } else {
        (field, path.to_string())
    }
}

/// A field's type: `string`, `integer (int32)`, `[]object`, `map[string]string`, ….
fn type_of(field: &Value) -> String {
    if field["x-kubernetes-int-or-string"] == true {
        return "integer or string".into();
    }
    match field["type"].as_str() {
        Some("array") => format!("[]{}", type_of(&field["items"])),
        Some("object") if field["additionalProperties"].is_object() => {
            format!("map[string]{}", type_of(&field["additionalProperties"]))
        }
        Some(t) => match field["format"].as_str() {
            Some(format) => format!("{t} ({format})"),
            None => t.to_string(),
        },
        None => "any".into(),
    }
}

/// What the API server checks of a field: required, bounds, choices, patterns, rules.
fn validation(field: &Value, required: bool) -> String {
    let mut checks = Vec::new();
    if required {
        checks.push("required".to_string());
    }
    if let Some(choices) = field["enum"].as_array() {
        let choices: Vec<String> = choices.iter().map(|c| format!("`{c}`")).collect();
        checks.push(format!("one of {}", choices.join(", ")));
    }
    for (key, says) in [
        ("minimum", "≥"),
        ("maximum", "≤"),
        ("minLength", "length ≥"),
        ("maxLength", "length ≤"),
        ("minItems", "items ≥"),
        ("maxItems", "items ≤"),
        ("maxProperties", "entries ≤"),
    ] {
        if let Some(n) = field[key].as_f64() {
            // As written: 256.0 shows as 256.
            checks.push(format!("{says} {n}"));
        }
    }
    if let Some(pattern) = field["pattern"].as_str() {
        checks.push(format!("matches `{pattern}`"));
    }
    for rule in field["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        match rule["message"].as_str() {
            Some(message) => checks.push(message.to_string()),
            None => checks.push(format!("`{}`", rule["rule"].as_str().unwrap_or_default())),
        }
    }
    checks.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_shows_its_type_default_validation_and_description() {
        let page = api_page(
            "---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n\
             spec:\n  group: x.dev\n  names: {kind: Thing, plural: things, shortNames: [th]}\n  scope: Namespaced\n\
             \x20 versions:\n  - name: v1\n    schema:\n      openAPIV3Schema:\n        properties:\n\
             \x20         spec:\n            required: [rules]\n            properties:\n\
             \x20             rules:\n                type: array\n                maxItems: 256\n\
             \x20               description: The rules.\n                items:\n                  type: object\n\
             \x20                 properties:\n                    to: {type: string, maxLength: 512, description: 'A | B'}\n\
             \x20             priority: {type: integer, format: int32, default: 0, minimum: -5.0}\n\
             \x20             labels: {type: object, additionalProperties: {type: string}}\n",
        )
        .unwrap();
        assert!(
            page.contains(
                "## Thing\n\n`x.dev/v1`, namespaced (`things`; short names: `th`; categories: none)"
            ),
            "{page}"
        );
        assert!(
            page.contains("| `spec.rules` | []object |  | required; items ≤ 256 | The rules. |"),
            "{page}"
        );
        assert!(
            page.contains("| `spec.rules[].to` | string |  | length ≤ 512 | A \\| B |"),
            "{page}"
        );
        assert!(
            page.contains("| `spec.priority` | integer (int32) | `0` | ≥ -5 |  |"),
            "{page}"
        );
        assert!(
            page.contains("| `spec.labels` | map[string]string |"),
            "{page}"
        );
        assert!(api_page("kind: [").is_err());
    }
}
