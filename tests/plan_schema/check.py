"""Validates plans against docs/plan.schema.json (Debian python3-jsonschema),
and checks that the schema refuses broken ones, so that it says something.
Usage: check.py SCHEMA PLAN.json..."""
import copy
import json
import sys

import jsonschema

schema = json.load(open(sys.argv[1]))
jsonschema.Draft202012Validator.check_schema(schema)
validator = jsonschema.Draft202012Validator(schema)
failed = False
plans = []
for path in sys.argv[2:]:
    plan = json.load(open(path))
    plans.append(plan)
    errors = list(validator.iter_errors(plan))
    for e in errors[:5]:
        print(f"{path}: {'/'.join(map(str, e.absolute_path))}: {e.message}")
    failed |= bool(errors)


def breaks(name, change):
    plan = copy.deepcopy(plans[0])
    change(plan)
    if validator.is_valid(plan):
        print(f"the schema accepts a plan with {name}")
        return True
    return False


layer = next(i for i, n in enumerate(plans[0]["nodes"]) if "types" in n)
failed |= breaks("a type IV", lambda p: p["nodes"][layer]["types"].__setitem__(0, "IV"))
failed |= breaks("no devices", lambda p: p.pop("devices"))
failed |= breaks("a node with types and carries",
                 lambda p: p["nodes"][layer].__setitem__("carries", "x"))
failed |= breaks("a box range of three numbers",
                 lambda p: p["nodes"][layer]["boxes"][0][0].append(3))
failed |= breaks("an unknown strategy", lambda p: p.__setitem__("strategy", "magic"))
if any(not any("layouts" in n for n in p["nodes"]) for p in plans[1:2]):
    print("the second plan should have joins")
    failed = True
sys.exit(1 if failed else 0)
