"""Compares the example client's report with `accparc plan --format json`
of the same model and array: every layer's types, every device's forward
bytes, step bytes and memory. Usage: check_client.py CLIENT_OUT PLAN_JSON"""
import json
import sys

client_lines = open(sys.argv[1]).read().splitlines()
plan = json.load(open(sys.argv[2]))

layers, devices, section = {}, [], None
for line in client_lines[1:]:
    words = line.split()
    if words[:2] == ["layer", "op"]:
        section = "layers"
    elif words[:1] == ["device"]:
        section = "devices"
    elif words[:1] == ["predicted"]:
        section = None
    elif section == "layers":
        layers[words[0]] = (words[1], words[2:])
    elif section == "devices":
        devices.append([float(w) for w in words[1:]])

want = {n["name"]: (n["op"], n["types"]) for n in plan["nodes"] if "types" in n}
errors = []
if layers != want:
    errors.append(f"layers differ:\n  client {layers}\n  plan   {want}")
if len(devices) != plan["n_devices"]:
    errors.append(f"{len(devices)} devices in the client's report, {plan['n_devices']} in the plan")
for dev, (fwd, step, mem) in enumerate(devices):
    expected = (plan["device_forward_bytes"][dev], plan["device_step_bytes"][dev],
                plan["device_mem_bytes"][dev])
    if (fwd, step) != expected[:2] or abs(mem - expected[2]) > 1e-5 * max(1.0, expected[2]):
        errors.append(f"device {dev}: client {(fwd, step, mem)}, plan {expected}")
if not layers:
    errors.append("the client printed no layer")
if errors:
    print("\n".join(errors))
    sys.exit(1)
print(f"client agrees with the plan: {len(layers)} layers, {len(devices)} devices")
