//! The schema of a status's `conditions`: `metav1.Condition`'s, with the bounds the API
//! server's own condition type declares (`type` 316, `reason` 1024, `message` 32768
//! characters), and at most 16 of them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::{Schema, SchemaGenerator};
use serde_json::{Value, json};

/// Most conditions an object's status holds.
pub const MAX_CONDITIONS: usize = 16;

/// Most characters of a condition's `type`, `reason` and `message`.
const BOUNDS: [(&str, usize); 3] = [("type", 316), ("reason", 1024), ("message", 32768)];

/// `#[schemars(schema_with = …)]` of a `conditions` field.
pub fn schema(generator: &mut SchemaGenerator) -> Schema {
    let mut schema = generator.subschema_for::<Vec<Condition>>();
    if let Some(list) = schema.as_object_mut() {
        list.insert("maxItems".into(), json!(MAX_CONDITIONS));
        if let Some(Value::Object(properties)) = list
            .get_mut("items")
            .and_then(|items| items.get_mut("properties"))
        {
            for (field, max) in BOUNDS {
                if let Some(Value::Object(p)) = properties.get_mut(field) {
                    p.insert("maxLength".into(), json!(max));
                }
            }
        }
    }
    schema
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_condition_message_of_every_crd_has_a_max_length() {
        for crd in crate::core::crd_yaml::all() {
            let yaml = serde_json::to_value(&crd).unwrap();
            let status = &yaml["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
                ["properties"]["conditions"];
            assert_eq!(status["maxItems"], 16, "{:?}", crd.metadata.name);
            let message = &status["items"]["properties"]["message"];
            assert_eq!(message["maxLength"], 32768, "{:?}", crd.metadata.name);
        }
    }
}
