//! A YAML writer for JSON values (the manifests): block mappings and sequences, every
//! string double-quoted with JSON's escapes (a YAML double-quoted scalar), so no value can
//! be read back as another type (`"1"`, `"no"`, `"0x10"` stay strings).

use serde_json::Value;

/// One YAML document (`---` line first) holding `v`.
pub fn document(v: &Value) -> String {
    let mut out = String::from("---\n");
    match v {
        Value::Object(m) if !m.is_empty() => block(v, 0, &mut out),
        Value::Array(a) if !a.is_empty() => block(v, 0, &mut out),
        _ => {
            out.push_str(&scalar(v));
            out.push('\n');
        }
    }
    out
}

/// A scalar, or an empty mapping / sequence, in flow style.
fn scalar(v: &Value) -> String {
    match v {
        Value::Object(_) => "{}".into(),
        Value::Array(_) => "[]".into(),
        // serde_json's string form escapes quotes, backslashes and control characters as
        // YAML's double-quoted style reads them.
        other => other.to_string(),
    }
}

/// A mapping key: plain when it is a safe word, else quoted.
fn key(k: &str) -> String {
    let plain = !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b))
        && k.as_bytes()[0].is_ascii_alphabetic();
    if plain {
        k.to_string()
    } else {
        Value::String(k.to_string()).to_string()
    }
}

fn is_block(v: &Value) -> bool {
    matches!(v, Value::Object(m) if !m.is_empty()) || matches!(v, Value::Array(a) if !a.is_empty())
}

/// Writes the non-empty mapping or sequence `v` at `indent` spaces.
fn block(v: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                out.push_str(&pad);
                out.push_str(&key(k));
                out.push(':');
                if is_block(x) {
                    out.push('\n');
                    block(x, indent + 2, out);
                } else {
                    out.push(' ');
                    out.push_str(&scalar(x));
                    out.push('\n');
                }
            }
        }
        Value::Array(a) => {
            for x in a {
                out.push_str(&pad);
                out.push('-');
                if is_block(x) {
                    // The item's first line follows "- "; the rest align under it.
                    let mut inner = String::new();
                    block(x, indent + 2, &mut inner);
                    out.push(' ');
                    out.push_str(&inner[indent + 2..]);
                } else {
                    out.push(' ');
                    out.push_str(&scalar(x));
                    out.push('\n');
                }
            }
        }
        _ => unreachable!("block() takes a non-empty mapping or sequence"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nested_mappings_and_sequences_indent_as_yaml_reads_them() {
        let v = json!({
            "apiVersion": "v1",
            "metadata": {"name": "a", "labels": {"app.kubernetes.io/name": "gpucbf"}},
            "spec": {"containers": [{"name": "c", "command": ["gpucbf", "fgpu", "--gain", "0.5"],
                                     "ports": [{"containerPort": 7200}]}],
                     "volumes": [], "x": {}},
            "list": [[1, 2], "s"],
        });
        // serde_json's maps keep their keys sorted.
        let want = "---
apiVersion: \"v1\"
list:
  - - 1
    - 2
  - \"s\"
metadata:
  labels:
    app.kubernetes.io/name: \"gpucbf\"
  name: \"a\"
spec:
  containers:
    - command:
        - \"gpucbf\"
        - \"fgpu\"
        - \"--gain\"
        - \"0.5\"
      name: \"c\"
      ports:
        - containerPort: 7200
  volumes: []
  x: {}
";
        assert_eq!(document(&v), want);
    }

    #[test]
    fn strings_stay_strings_and_odd_keys_are_quoted() {
        let v = json!({"a b": "no", "7": "1", "q": "say \"hi\"\n", "t": true, "n": null});
        let d = document(&v);
        assert!(d.contains("\"a b\": \"no\"\n"), "{d}");
        assert!(d.contains("\"7\": \"1\"\n"), "{d}");
        assert!(d.contains("q: \"say \\\"hi\\\"\\n\"\n"), "{d}");
        assert!(d.contains("t: true\n") && d.contains("n: null\n"), "{d}");
        assert_eq!(document(&json!("x")), "---\n\"x\"\n");
    }
}
