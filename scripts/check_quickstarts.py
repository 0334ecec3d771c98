#!/usr/bin/env python3
"""Checks offline what no test bed runs of the quick starts (docs/quickstart/*.md; the bed runs
their `sh` blocks: tests/it/bed/quickstart.rs) and of the other pages given (`make lint-aws`: docs/*.md).
Exits 1 on any finding.

`aws` commands of `sh` and `sh aws` blocks: the operation is in botocore's models (or the CLI's own
command in HIGH_LEVEL), each option an input member (kebab-case, as the CLI names them) or a global
one, required members given, enums valid; JSON values (inline, or `file://NAME` of the page's `json
file=NAME` block) pass botocore's ParamValidator, a string with a `$` standing for any value;
every `$NAME` in a `sh` block set above its use (no placeholder left to guess);
`cloudformation deploy --parameter-overrides` keys are the template's, and the template within
CloudFormation's quotas (TEMPLATE_BODY_MAX without --s3-bucket). `json file=` blocks parse.
`yaml parallelcluster` blocks load with ParallelCluster's own schema as `pcluster create-cluster` does
but for what calls AWS (SlurmClusterConfig, the validators); a fragment, with the sections it lacks partial.

aws-parallelcluster is installed with --no-deps (`# no-deps` in testbed/requirements.txt, read by
scripts/install-deps.sh): 3.16.1 declares its CLI's runtime, AWS CDK v1 and jsii (Node.js at import),
connexion, aiohttp: 67 packages, attrs downgraded. The schema needs marshmallow and packaging, pinned
beside it, PyYAML and boto3 (moto's); `pip check` lists the rest as missing.
"""

from __future__ import annotations

import argparse
import difflib
import itertools
import json
import os
import re
import shlex
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import botocore.session
import yaml
from botocore import xform_name
from botocore.validate import ParamValidator
from marshmallow import ValidationError

try:
    from pcluster.schemas.cluster_schema import ClusterSchema
    from pcluster.utils import yaml_load
except ImportError as e:
    sys.exit(f"check_quickstarts: {e}: run make deps (aws-parallelcluster, testbed/requirements.txt)")

REPO = Path(__file__).resolve().parent.parent
Opts = list[tuple[str, list[str]]]


def spec(text: str) -> dict[str, bool]:  # option -> takes a value (a trailing `=`)
    return {w.rstrip("="): w.endswith("=") for w in text.split()}


# The AWS CLI v2's global options (awscli/data/cli.json), and a paginated operation's (customizations/paginate.py).
GLOBALS = spec(
    "debug endpoint-url= no-verify-ssl no-paginate output= query= profile= region= version color= no-sign-request "
    "ca-bundle= cli-read-timeout= cli-connect-timeout= cli-binary-format= no-cli-pager cli-auto-prompt "
    "no-cli-auto-prompt cli-error-format= generate-cli-skeleton="
)
INPUT, PAGING = {"cli-input-json", "cli-input-yaml"}, "starting-token= page-size= max-items="

# What a shell has set already (a `sh` block may use these unset by the page).
SHELL_VARIABLES = {"HOME", "PATH", "PWD", "USER", "HOSTNAME", "SHELL", "TMPDIR", "UID", "EUID", "RANDOM", "OLDPWD"}

# An assignment at the start of a command (not `--tags Key=...` in its arguments).
ASSIGNMENT = r"(?:^|[;&|(]\s*|\bexport\s+|\blocal\s+|\bthen\s+|\bdo\s+)([A-Za-z_]\w*)="

# CloudFormation's quotas (User Guide, "Understand CloudFormation quotas"): a template passed as a body
# (what `aws cloudformation deploy` does without --s3-bucket: its help, "--s3-bucket ... required for
# deployments of templates sized greater than 51,200 bytes") and the counts of one template.
TEMPLATE_BODY_MAX = 51_200
TEMPLATE_COUNTS_MAX = {"Resources": 500, "Parameters": 200, "Outputs": 200, "Mappings": 200}
ALIASES = {"s3api": "s3", "configservice": "config", "deploy": "codedeploy"}  # CLI command -> botocore service
# The CLI's changes to generated commands: options added, members removed (aws-cli v2: customizations/ec2/).
CUSTOM = {("ec2", "RunInstances"): ("count= associate-public-ip-address", {"MinCount", "MaxCount"})}
# The AWS CLI's own commands, not in botocore, and the options of theirs the pages may use, from the AWS CLI
# v2 reference: https://awscli.amazonaws.com/v2/documentation/api/latest/reference/SERVICE/COMMAND.html
_COPY = "recursive dryrun quiet only-show-errors no-progress include= exclude= acl= sse= sse-kms-key-id= content-type="
HIGH_LEVEL = {
    ("s3", "cp"): _COPY + " expected-size= no-overwrite",
    ("s3", "sync"): _COPY + " delete exact-timestamps size-only no-overwrite",
    ("s3", "ls"): "recursive page-size= human-readable summarize",
    ("cloudformation", "deploy"): "template-file= stack-name= s3-bucket= s3-prefix= force-upload kms-key-id= "
    "parameter-overrides= capabilities= no-execute-changeset disable-rollback no-disable-rollback role-arn= "
    "notification-arns= fail-on-empty-changeset no-fail-on-empty-changeset tags=",
}


@dataclass
class Block:
    info: list[str]
    line: int  # its opening fence's
    lines: list[str] = field(default_factory=list)
    closed: bool = False

    def at(self, k: int) -> int:
        return self.line + 1 + k

    def file(self) -> str:  # NAME of `json file=NAME`
        return next((w[5:] for w in self.info[1:] if w.startswith("file=")), "")


@dataclass
class Command:
    segments: list[tuple[int, str]]  # (line, text) of each continued line
    words: list[str]

    def line_of(self, needle: str) -> int:
        return next((n for n, text in self.segments if needle in text), self.segments[0][0])


def blocks(text: str) -> list[Block]:
    """The fenced blocks of a page, read as tests/it/bed/quickstart.rs reads them (which fails an open one)."""
    out: list[Block] = []
    indent = ""  # a block inside a list item is indented as the item is
    for i, line in enumerate(text.splitlines(), 1):
        if (not out or out[-1].closed) and line.lstrip(" ").startswith("```"):
            indent = line[: len(line) - len(line.lstrip(" "))]
            out.append(Block(line.lstrip(" ")[3:].split(), i))
        elif out and not out[-1].closed:
            out[-1].closed = line.rstrip() == indent + "```"
            out[-1].lines += [] if out[-1].closed else [line.removeprefix(indent)]
    return out


def commands(block: Block) -> Iterator[Command]:
    segments: list[tuple[int, str]] = []
    heredoc = None
    for k, line in enumerate(block.lines):
        if heredoc is not None or (not segments and line.lstrip().startswith("#")):
            heredoc = None if line.strip() == heredoc else heredoc
            continue
        segments.append((block.at(k), line.removesuffix("\\")))
        if line.endswith("\\"):
            continue
        joined = " ".join(text for _, text in segments)
        heredoc = m.group(2) if (m := re.search(r"<<-?\s*(['\"]?)(\w+)\1", joined)) else None
        if joined.lstrip().startswith("aws "):  # its words up to a pipe, list or redirection; `$(...)` one word
            joined = re.sub(r"(?<=\s)\d+(?=[<>])", "", re.sub(r"`[^`]*`", "$SUBST", joined))  # 2>, `...`
            while (shorter := re.sub(r"\$\([^()]*\)", "$SUBST", joined)) != joined:
                joined = shorter
            lexer = shlex.shlex(joined, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            yield Command(segments, list(itertools.takewhile(lambda w: not set(w) <= set("();<>|&"), lexer)))
        segments = []


def hint(name: str, known: Any, prefix: str = "--") -> str:
    close = difflib.get_close_matches(name, list(known), n=3)
    return f"; did you mean {', '.join(prefix + c for c in close)}?" if close else ""


def placeholder(value: Any, path: Any) -> bool:  # is the value at `path` a string with a `$`, standing for any?
    for key in path:
        ok = isinstance(value, dict) and key in value or isinstance(value, list) and key in range(len(value))
        value = value[key] if ok else None
    return isinstance(value, str) and "$" in value


class OfflineClusterSchema(ClusterSchema):  # type: ignore[misc]
    # Without ClusterSchema's post_load (SlurmClusterConfig, which calls EC2): undecorated, it is no hook.
    def make_resource(self, data: dict[str, Any], original_data: Any = None, **_: Any) -> dict[str, Any]:
        return data


class Checker:
    def __init__(self, pages: dict[str, str]) -> None:
        self.session = botocore.session.get_session()
        self.services = set(self.session.get_available_services())
        loader = self.session.get_component("data_loader")
        self.waitable, self.paginated = (set(loader.list_available_services(k)) for k in ("waiters-2", "paginators-1"))
        self.findings: list[tuple[str, int, str]] = []
        self.counts = {"aws commands": 0, "JSON files": 0, "ParallelCluster configs": 0, "shell variables": 0}
        self.structured: list[tuple[str, Block]] = []  # json blocks validated against a structure
        for name, text in pages.items():
            self.page(name, text)

    def report(self, line: int, message: str) -> None:
        self.findings.append((self.name, line, message))

    def page(self, name: str, text: str) -> None:
        self.name, found = name, blocks(text)
        self.files = {b.file(): b for b in found if b.info[:1] == ["json"] and b.file()}
        self.parsed = {name: self.json_of(b) for name, b in self.files.items()}
        self.counts["JSON files"] += len(self.files)
        self.variables(found)
        for b in found:
            for c in commands(b) if b.info[:1] == ["sh"] else []:
                self.counts["aws commands"] += 1
                self.command(c)
            if b.info[:2] == ["yaml", "parallelcluster"]:
                self.counts["ParallelCluster configs"] += 1
                self.config(b)

    def variables(self, found: list[Block]) -> None:
        """Every `$NAME` of a `sh` block is set before it is used, on the page: an assignment at the start
        of a command, `export`, `for NAME in` or `read NAME` earlier on the line or in a block above. A
        reader copies the blocks in order; a name set nowhere is a placeholder they cannot fill in. Heredoc
        bodies define nothing (and a quoted one expands nothing); `${NAME:-...}` has its own default."""
        defined = set(SHELL_VARIABLES)
        for b in found:
            if b.info[:1] != ["sh"]:
                continue
            heredoc: tuple[str, bool] | None = None  # (terminator, expands)
            for k, line in enumerate(b.lines):
                if heredoc is not None:
                    if line.strip() == heredoc[0]:
                        heredoc = None
                    elif heredoc[1]:
                        self.uses(b.at(k), line, [], defined)
                    continue
                code = re.sub(r"'[^']*'", "", re.sub(r"(^|\s)#.*", "", line))  # no comments, no '...'
                defs = [(m.start(1), m.group(1)) for m in re.finditer(ASSIGNMENT, code)]
                defs += [(m.start(1), m.group(1)) for m in re.finditer(r"\bfor\s+(\w+)\s+in\b", code)]
                for m in re.finditer(r"\bread\s+((?:-\w+\s+)*[\w\s]+)", code):
                    defs += [(m.start(1), w) for w in m.group(1).split() if not w.startswith("-")]
                self.uses(b.at(k), code, defs, defined)
                defined.update(name for _, name in defs)
                if m := re.search(r"<<-?\s*(['\"]?)(\w+)\1", line):
                    heredoc = (m.group(2), not m.group(1))

    def uses(self, line: int, code: str, defs: list[tuple[int, str]], defined: set[str]) -> None:
        for m in re.finditer(r"(?<!\\)\$\{?([A-Za-z_]\w*)(:?[-=+?])?", code):
            self.counts["shell variables"] += 1
            name, has_default = m.group(1), m.group(2) is not None and m.group(0).startswith("${")
            earlier = any(at < m.start() and n == name for at, n in defs)
            if name not in defined and not earlier and not has_default:
                self.report(line, f"${name} is set nowhere before this line: set it in a block above")

    def json_of(self, b: Block) -> Any:
        try:
            return json.loads("\n".join(b.lines))
        except json.JSONDecodeError as e:
            self.report(b.at(e.lineno - 1), f"json file={b.file()} is not JSON: {e.msg}: fix it")

    def command(self, c: Command) -> None:
        w, i, first = c.words[1:], 0, c.segments[0][0]
        while i < len(w) and w[i].startswith("--"):
            i += 1 + (GLOBALS.get(w[i][2:], False) and "=" not in w[i])
        if len(w) < i + 2:
            return self.report(first, f"`aws {' '.join(w)}` names no operation: write `aws SERVICE OPERATION`")
        service, op, opts, positional = w[i], w[i + 1], Opts(), list[str]()
        for t in w[i + 2 :]:  # (name, values) of each --option, and the words before the first
            if t.startswith("--"):
                opts.append((t[2:].partition("=")[0], [t.partition("=")[2]] if "=" in t else []))
            else:
                (opts[-1][1] if opts else positional).append(t)
        what, name = f"aws {service} {op}", ALIASES.get(service, service)
        if (service, op) in HIGH_LEVEL:
            return self.high_level(c, what, spec(HIGH_LEVEL[(service, op)]), opts)
        if service == "s3" or name not in self.services:
            alt = " (the S3 API is `aws s3api`)" if service == "s3" else hint(service, self.services, "")
            return self.report(first, f"{what}: no such command in botocore's models nor in HIGH_LEVEL{alt}")
        model = self.session.get_service_model(name)
        cli_ops = {xform_name(o, "-"): o for o in model.operation_names}
        waiters = self.session.get_waiter_model(name) if op == "wait" and name in self.waitable else None
        by_cli = {xform_name(n, "-"): n for n in waiters.waiter_names} if waiters else {}
        if waiters and (waiter := by_cli.get((positional or [""])[0])):  # `wait WAITER`: its operation's options
            cli_ops[op], positional = waiters.get_waiter(waiter).operation, positional[1:]
        if op not in cli_ops:
            near = hint(*((positional or [""])[0], by_cli) if op == "wait" else (op, cli_ops), "")
            return self.report(first, f"{what}: no such {'waiter' if op == 'wait' else 'operation'}{near}")
        for p in positional:
            self.report(c.line_of(p), f"{what}: unexpected argument {p!r}: quote it, or name its option")
        self.operation(c, what, name, model.operation_model(cli_ops[op]), opts)

    def operation(self, c: Command, what: str, service: str, op: Any, opts: Opts) -> None:
        shape, (added, removed) = op.input_shape, CUSTOM.get((service, op.name), ("", set[str]()))
        members = {xform_name(m, "-"): m for m in (shape.members if shape else {}) if m not in removed}
        paged = service in self.paginated and op.name in self.session.get_paginator_model(service)._paginator_config
        extra = spec(added + (" " + PAGING if paged else ""))
        given: set[str] = set()
        for name, values in opts:
            line, value = c.line_of("--" + name), (values or [""])[0]
            member = members.get(name) or members.get(name.removeprefix("no-"), "")
            is_flag = member and shape.members[member].type_name == "boolean"
            if name in INPUT:
                params = self.json_value(line, what, shape, value, top=True)
                given.update(params if isinstance(params, dict) else members.values())
            elif name in GLOBALS or name in extra:
                pass
            elif not member or (member != members.get(name) and not is_flag):
                self.report(line, f"{what}: --{name} is not an option of {op.name}{hint(name, [*members, *extra])}")
            elif is_flag and values:
                self.report(line, f"{what}: --{name} is a flag, it takes no value ({value!r}): remove it")
            elif not is_flag and not values:
                self.report(line, f"{what}: --{name} needs a value")
            elif not is_flag and self.json_value(line, f"{what} --{name}", shape.members[member], value) is None:
                kind = shape.members[member]
                enum = getattr(kind.member if kind.type_name == "list" else kind, "enum", [])
                for v in (v for v in values if enum and "$" not in v and v not in enum):
                    self.report(line, f"{what} --{name}: {v!r} is not one of {', '.join(enum)}")
            given.add(member)
        for member in sorted(set(shape.required_members if shape else []) - given - removed):
            self.report(c.segments[0][0], f"{what}: --{xform_name(member, '-')} is required by {op.name}: add it")

    def json_value(self, line: int, what: str, shape: Any, value: str, top: bool = False) -> Any:
        """A JSON value (inline, or `file://NAME` of the page's block) validated; None if there is none."""
        if value.startswith("file://") and (b := self.files.get(value[7:].removeprefix("./"))):
            params = self.parsed[b.file()]
        elif value[:1] in ("{", "[") and not top:
            b = Block([], line)
            try:
                params = json.loads(value)
            except json.JSONDecodeError:
                return None  # shorthand syntax: not checked
        else:
            return None
        if params is not None and (top or shape.type_name in ("structure", "list", "map")):
            self.validate(b, line, what, params, shape, top)
        return params

    def validate(self, b: Block, line: int, what: str, params: Any, shape: Any, top: bool) -> None:
        """botocore's ParamValidator; the parts of its report read (_errors, _format_error) are private."""
        if b.lines and shape.type_name == "structure" and (self.name, b) not in self.structured:
            self.structured.append((self.name, b))
        errors = ParamValidator().validate(params, shape)
        for error in errors._errors:
            kind, name, extra = error
            path = [int(k[1:-1]) if k[0] == "[" else k for k in re.findall(r"\[\d+\]|[^.\[\]]+", name)]
            if (kind == "missing required field" and top and not name) or placeholder(params, path):
                continue  # the command line may give it (checked with the options), or a placeholder
            key = extra.get("unknown_param") or next((k for k in reversed(path) if isinstance(k, str)), "")
            at = next((b.at(k) for k, text in enumerate(b.lines) if f'"{key}"' in text), b.at(0) if b.lines else line)
            source = f"json file={b.file()}" if b.file() else "inline JSON"
            self.report(at, f"{source} (for {what}): {errors._format_error(error)}")

    def high_level(self, c: Command, what: str, known: dict[str, bool], opts: Opts) -> None:
        page = "https://awscli.amazonaws.com/v2/documentation/api/latest/reference/" + what[4:].replace(" ", "/")
        for name, values in opts:
            line = c.line_of("--" + name)
            if name not in known and name not in GLOBALS:
                self.report(line, f"{what}: --{name} is not an option ({page}.html){hint(name, known)}")
            elif known.get(name) and not values:
                self.report(line, f"{what}: --{name} needs a value")
        if what != "aws cloudformation deploy":
            return
        given = dict(opts)
        for need in ("template-file", "stack-name"):
            if not given.get(need):
                self.report(c.segments[0][0], f"{what}: --{need} is required: add it")
        enum = self.session.get_service_model("cloudformation").shape_for("Capability").enum
        for v in given.get("capabilities", []):
            if "$" not in v and v not in enum:
                self.report(c.line_of(v), f"{what}: --capabilities {v} is not one of {', '.join(enum)}")
        template = (given.get("template-file") or ["$"])[0]
        try:
            body = "" if "$" in template else (REPO / template).read_text()
            parameters = json.loads(body)["Parameters"] if body else {}
        except (OSError, ValueError, KeyError) as e:
            return self.report(c.line_of(template), f"{what}: no Parameters in {template} ({e!r}): fix the path")
        size = len(body.encode())
        if size > TEMPLATE_BODY_MAX and not given.get("s3-bucket"):
            self.report(
                c.line_of(template),
                f"{what}: {template} is {size:,} bytes, over CloudFormation's {TEMPLATE_BODY_MAX:,}-byte limit for "
                "a template body, which CloudFormation refuses: add --s3-bucket BUCKET (deploy uploads it there)",
            )
        for section, most in TEMPLATE_COUNTS_MAX.items() if body else ():
            if (n := len(json.loads(body).get(section, {}))) > most:
                self.report(c.line_of(template), f"{what}: {template} has {n} {section}, over CloudFormation's {most}")
        for kv in given.get("parameter-overrides", []) if parameters else []:
            if "=" in kv and (key := kv.partition("=")[0]) not in parameters:
                self.report(c.line_of(kv), f"{what}: {key} is not a Parameter of {template}{hint(key, parameters, '')}")

    def config(self, b: Block) -> None:
        text = "\n".join(b.lines)
        try:
            doc, root = yaml_load(text), yaml.compose(text)  # pcluster's loader refuses duplicate keys
        except yaml.YAMLError as e:
            at = b.at(mark.line) if (mark := getattr(e, "problem_mark", None)) else b.line
            return self.report(at, f"yaml parallelcluster: not YAML: {e}".replace("\n", " "))
        if not isinstance(doc, dict):
            return self.report(b.line, "yaml parallelcluster: not a mapping: write a cluster configuration")
        schema = OfflineClusterSchema(cluster_name="quickstart")
        partial = tuple(n for n, f in schema.fields.items() if f.required and f.data_key not in doc)
        os.environ["AWS_DEFAULT_REGION"] = str(doc.get("Region") or "us-east-1")  # read by pcluster's get_region()
        try:
            schema.load(doc, partial=partial)
        except ValidationError as e:
            for path, message in flatten(e.messages):
                where = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path)[1:]
                if not placeholder(doc, path):
                    self.report(b.at(yaml_line(root, path)), f"ParallelCluster 3 config: {where}: {message}")


def flatten(messages: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], str]]:
    """marshmallow's nested messages as (path, message)."""
    if not isinstance(messages, dict):
        yield path, " ".join(map(str, messages)) if isinstance(messages, list) else str(messages)
    for k, v in messages.items() if isinstance(messages, dict) else []:
        yield from flatten(v, path if k == "_schema" else (*path, k))


def yaml_line(node: Any, path: tuple[Any, ...]) -> int:
    """The line, in its block, of the deepest node of `path` there is."""
    line = node.start_mark.line
    for key in path:
        if isinstance(node, yaml.MappingNode):
            found = [(k.start_mark.line, v) for k, v in node.value if k.value == key]
        else:
            found = [(v.start_mark.line, v) for i, v in enumerate(getattr(node, "value", [])) if i == key]
        if not found:
            break
        line, node = found[0]
    return int(line)


def release_versions(pages: dict[str, str]) -> list[tuple[str, int, str]]:
    """A release the pages download is this crate's version (Cargo.toml), which the release workflow
    publishes as tag vVERSION: a page never points at another release than the code beside it."""
    version = tomllib.loads((REPO / "Cargo.toml").read_text())["package"]["version"]
    found = []
    for name, text in pages.items():
        for k, line in enumerate(text.split("\n"), 1):
            for m in re.finditer(r"releases/download/v([\w.+-]+)", line):
                if m.group(1) != version:
                    found.append((name, k, f"release v{m.group(1)} is not this crate's version {version} (Cargo.toml)"))
    return found


def self_test(pages: dict[str, str]) -> int:
    """Adds an `x` to an aws command's option, a pool's key and a validated json file= key, and takes a
    deploy's --s3-bucket away (the template is over CloudFormation's body limit): each caught?"""
    checker, sites, caught = Checker(pages), dict[str, tuple[str, int, str]](), 0
    option, pool_key, json_key = "an option of an aws command", "a LoginNodes pool's key", "a validated json file= key"
    for name, text in pages.items():
        for b in blocks(text):
            for c in commands(b) if b.info[:1] == ["sh"] else []:
                if flag := next((w for w in c.words if w.startswith("--")), None):
                    sites.setdefault(option, (name, c.line_of(flag), r"--[\w-]+"))
            pools = next((k for k, t in enumerate(b.lines) if re.match(r"\s*Pools\s*:", t)), len(b.lines))
            keys = [k for k, t in enumerate(b.lines) if k > pools and re.match(r"\s*-?\s*\w+\s*:", t)]
            if b.info[:2] == ["yaml", "parallelcluster"] and keys:
                sites.setdefault(pool_key, (name, b.at(keys[0]), r"\w+(?=\s*:)"))
    for name, b in checker.structured[:1]:
        k = next((k for k, t in enumerate(b.lines) if re.search(r'"\w+"\s*:', t)), 0)
        sites[json_key] = (name, b.at(k), r'"\w+(?=")')
    variable = "a shell variable's use"
    for name, text in pages.items():
        for b in blocks(text):
            for k, t in enumerate(b.lines if b.info[:1] == ["sh"] else []):
                if re.search(r'"\$[A-Z_]+"', t) and not t.lstrip().startswith("export"):
                    sites.setdefault(variable, (name, b.at(k), r'(?<="\$)[A-Z_]+'))
    deploy = "a deploy's --s3-bucket"
    for name, text in pages.items():
        for k, t in enumerate(text.split("\n")):
            if re.search(r"--s3-bucket \S+ ?", t) and "cloudformation" in text:
                sites.setdefault(deploy, (name, k + 1, r"--s3-bucket \S+ ?"))
    for what in (option, pool_key, json_key, variable, deploy):
        if what not in sites:
            print(f"self-test: failed: the pages have no {what[2:] if what[1] == ' ' else what} to rename")
            continue
        name, line, pattern = sites[what]
        lines = pages[name].split("\n")
        cut = what == deploy  # removed, not renamed: the template is then sent as a body
        lines[line - 1] = re.sub(pattern, "" if cut else r"\g<0>x", lines[line - 1], count=1)
        new = [f for f in Checker({**pages, name: "\n".join(lines)}).findings if f not in checker.findings]
        done = "removed" if cut else "renamed"
        print(f"self-test: {name}:{line}: {what} {done}: " + (f"caught: {new[0][2]}" if new else "NOT caught"))
        caught += bool(new)
    return 0 if caught == 5 else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--self-test", action="store_true", help="check that a renamed option or key is caught")
    parser.add_argument("pages", nargs="*", type=Path, help="default: docs/quickstart/*.md")
    args = parser.parse_args()
    paths = [p.resolve() for p in args.pages or (REPO / "docs" / "quickstart").glob("*.md")]
    pages = {str(p.relative_to(REPO) if p.is_relative_to(REPO) else p): p.read_text() for p in sorted(paths)}
    if not pages:
        sys.exit("check_quickstarts: no pages in docs/quickstart")
    if args.self_test:
        return self_test(pages)
    checker = Checker(pages)
    checker.findings += release_versions(pages)
    for name, line, message in sorted(checker.findings, key=lambda f: f[:2]):
        print(f"{name}:{line}: {message}")
    counts = ", ".join(f"{n} {what}" for what, n in checker.counts.items())
    print(f"quick starts: {len(pages)} pages; {counts} checked; {'findings above' if checker.findings else 'clean'}")
    return 1 if checker.findings else 0


if __name__ == "__main__":
    sys.exit(main())
