//! Kubernetes objects for a [`Plan`]: a ConfigMap holding the plan (the array description)
//! and one Pod per engine.
//!
//! Each Pod runs on its host (`nodeSelector` on `kubernetes.io/hostname`) with host
//! networking (the multicast groups and the data NICs are the host's), the engine's exact
//! command line, and resources with requests = limits (Guaranteed QoS): whole CPUs (the
//! static CPU manager gives them exclusive cores), memory, and for the F- and XB-engines
//! `nvidia.com/gpu: 1`, the RDMA device resource and 2 MiB hugepages (mounted at
//! /dev/hugepages). Probes run `gpucbf katcp-request` in the container: liveness is
//! `?watchdog`, readiness is `device-status` being nominal. Prometheus scrapes the engine's
//! `--prometheus-port` (annotations `prometheus.io/scrape`, `port`, `path`).

use serde_json::{json, Map, Value};

use super::plan::{Engine, Kind, Plan};
use super::DeployArgs;

/// The ConfigMap's name.
pub fn configmap_name(args: &DeployArgs) -> String {
    format!("{}-array", args.name)
}

/// Every object: the ConfigMap, then one Pod per engine.
pub fn objects(args: &DeployArgs, plan: &Plan) -> anyhow::Result<Vec<Value>> {
    let mut v = vec![configmap(args, plan)?];
    v.extend(plan.engines.iter().map(|e| pod(args, e)));
    Ok(v)
}

/// The objects as one `v1/List`.
pub fn list(args: &DeployArgs, plan: &Plan) -> anyhow::Result<Value> {
    Ok(json!({"apiVersion": "v1", "kind": "List", "items": objects(args, plan)?}))
}

fn labels(args: &DeployArgs, e: Option<&Engine>) -> Value {
    let mut m = Map::new();
    m.insert("app.kubernetes.io/name".into(), "gpucbf".into());
    m.insert(
        "app.kubernetes.io/instance".into(),
        args.name.clone().into(),
    );
    if let Some(e) = e {
        m.insert("app.kubernetes.io/component".into(), e.kind.name().into());
        m.insert("gpucbf/engine".into(), e.name.clone().into());
    }
    Value::Object(m)
}

fn configmap(args: &DeployArgs, plan: &Plan) -> anyhow::Result<Value> {
    Ok(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": configmap_name(args),
            "namespace": args.namespace,
            "labels": labels(args, None),
        },
        "data": {"array.json": serde_json::to_string_pretty(plan)? + "\n"},
    }))
}

/// The probe command: `gpucbf katcp-request 127.0.0.1:PORT REQUEST...` (host networking:
/// the engine's katcp port is the pod's).
fn probe(e: &Engine, request: &[&str]) -> Vec<String> {
    [
        "gpucbf",
        "katcp-request",
        &format!("127.0.0.1:{}", e.katcp_port),
    ]
    .iter()
    .chain(request)
    .map(|s| s.to_string())
    .collect()
}

/// The probes' katcp requests: liveness, readiness.
pub fn probe_commands(e: &Engine) -> (Vec<String>, Vec<String>) {
    (
        probe(e, &["watchdog"]),
        probe(
            e,
            &[
                "sensor-value",
                "device-status",
                "--expect-status",
                "nominal",
            ],
        ),
    )
}

fn pod(args: &DeployArgs, e: &Engine) -> Value {
    let mut res = Map::new();
    res.insert("cpu".into(), e.cores.to_string().into());
    res.insert("memory".into(), args.memory.clone().into());
    let engine = e.kind != Kind::Dsim;
    if engine && e.gpu {
        res.insert("nvidia.com/gpu".into(), "1".into());
    }
    if engine && !args.rdma_resource.is_empty() {
        res.insert(args.rdma_resource.clone(), "1".into());
    }
    let hugepages = engine && args.hugepages != "0";
    if hugepages {
        res.insert("hugepages-2Mi".into(), args.hugepages.clone().into());
    }
    let res = Value::Object(res);
    let (live, ready) = probe_commands(e);
    let mut mounts = vec![json!({"name": "array", "mountPath": "/etc/gpucbf", "readOnly": true})];
    let mut volumes = vec![json!({"name": "array", "configMap": {"name": configmap_name(args)}})];
    if hugepages {
        mounts.push(json!({"name": "hugepages", "mountPath": "/dev/hugepages"}));
        volumes.push(json!({"name": "hugepages", "emptyDir": {"medium": "HugePages-2Mi"}}));
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("{}-{}", args.name, e.name),
            "namespace": args.namespace,
            "labels": labels(args, Some(e)),
            "annotations": {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": e.prometheus_port.to_string(),
                "prometheus.io/path": "/metrics",
            },
        },
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": e.host},
            "hostNetwork": true,
            "dnsPolicy": "ClusterFirstWithHostNet",
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 10,
            "containers": [{
                "name": e.kind.name(),
                "image": args.image,
                "imagePullPolicy": "IfNotPresent",
                "command": e.argv,
                "ports": [
                    {"name": "katcp", "containerPort": e.katcp_port, "protocol": "TCP"},
                    {"name": "metrics", "containerPort": e.prometheus_port, "protocol": "TCP"},
                ],
                "resources": {"requests": res.clone(), "limits": res},
                "securityContext": {
                    // Locked chunk memory, raw-packet queue pairs (--recv-ibv), schedrr.
                    "capabilities": {"add": ["IPC_LOCK", "NET_RAW", "SYS_NICE"]},
                },
                "livenessProbe": {
                    "exec": {"command": live},
                    "initialDelaySeconds": 30,
                    "periodSeconds": 10,
                    "timeoutSeconds": 5,
                    "failureThreshold": 3,
                },
                "readinessProbe": {
                    "exec": {"command": ready},
                    "initialDelaySeconds": 5,
                    "periodSeconds": 5,
                    "timeoutSeconds": 5,
                },
                "volumeMounts": mounts,
            }],
            "volumes": volumes,
        },
    })
}
