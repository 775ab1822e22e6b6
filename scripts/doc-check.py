#!/usr/bin/env python3
"""Doc-check: runs the shell examples of the docs and compares what they print with what the
docs show, in the spirit of rustdoc's doc-tests.

    python3 scripts/doc-check.py [--bin PATH] [--postgres auto|yes|no] [FILE.md ...]
    python3 scripts/doc-check.py --self-test

Default files: README.md, then docs/WALKTHROUGH.md. Each file is run in its own `bash`
session, its blocks in order (variables carry over from block to block), in a scratch
directory that holds a copy of `examples/`, with `checkout-server` on PATH (built with
`cargo build -p host-http` unless --bin names a binary).

The markdown conventions:

- A ```sh block is a command block. Words after `sh` in its info string:
  `server`   a long-running server: started in the background (inheriting what the shell
             exports), and its output compared as soon as it matches; a later server block on
             the same port stops it first, as the docs tell the reader to, and every server
             is stopped (SIGINT, as Ctrl-C) at the end of its file;
  `postgres` needs PostgreSQL on 127.0.0.1:5432 (run with --postgres yes, as CI does;
             skipped with --postgres no; auto runs them when the port answers);
  `skip`     shown but not run (the docs say why).
- Every command block is followed, before the next one, by exactly one output block: a fenced
  block whose info string contains the word `output` (```text output, ```json output). It shows
  what the block prints, stdout and stderr together, as a terminal shows them.
- In an output block `…` matches any text within a line, and a line holding only `…` matches
  any number of lines. Everything else is compared exactly (trailing blanks aside). In a block
  that pipes through `jq`, numbers are compared by value: jq 1.6 prints `119.00` as `119`, jq
  1.7 keeps `119.00`.
- A command line containing `…` stands for the line printed earlier (by a server or a block)
  that it matches, as a reader copies `AUTH='wid_…:…'` from the server's banner.
- A fenced block whose info string holds `excerpt=PATH` (```python excerpt=examples/x.py)
  shows a part of the file PATH (relative to the markdown file) and is not run: its lines must
  stand in that file verbatim and in one piece, so that the docs never show code the file
  no longer has. Excerpts are checked before any block runs.

What the docs show and what runs differ only in addresses: every `127.0.0.1:PORT` of a command
(other than PostgreSQL's 5432) is given a free port, `CHECKOUT_LISTEN` is set to the one that
stands for 8080, and outputs are compared with the documented ports put back. A PostgreSQL
database made with `createdb … NAME` gets a unique name, dropped at the end.

Exit status 0 when every block printed what the docs show and every excerpt is in its file; 1
with a diff per differing block or excerpt (file and line of the block); 2 when a doc breaks
the conventions (or an excerpt names a file that does not exist).
"""

import argparse
import difflib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_FILES = ["README.md", "docs/WALKTHROUGH.md"]
COMMAND_LANGS = {"sh", "bash", "shell"}
FLAGS = {"server", "postgres", "skip"}
ELLIPSIS = "…"
PG_PORT = 5432


class DocError(Exception):
    """A doc that breaks the conventions above."""


class ShellLost(Exception):
    """The file's shell ended or stopped answering: its later blocks cannot run."""

    def __init__(self, block, message):
        super().__init__(message)
        self.block = block


@dataclass
class Block:
    path: str
    line: int
    flags: set
    text: str
    expected: str = ""
    expected_line: int = 0

    @property
    def where(self):
        return f"{self.path}:{self.line}"


def fenced_blocks(path, text):
    """Every fenced block of one markdown file: (line of its opening fence, the words of its
    info string, its body)."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        fence = re.match(r"^(`{3,})(.*)$", lines[i])
        if not fence:
            i += 1
            continue
        ticks, words = fence.group(1), fence.group(2).split()
        start = i + 1
        j = start
        while j < len(lines) and not lines[j].startswith(ticks):
            j += 1
        if j == len(lines):
            raise DocError(f"{path}:{i + 1}: unclosed code block")
        yield i + 1, words, "\n".join(lines[start:j])
        i = j + 1


def parse(path, text):
    """The command blocks of one markdown file, each with its output block."""
    blocks = []
    pending = None
    for line, words, body in fenced_blocks(path, text):
        lang, rest = (words[0], words[1:]) if words else ("", [])
        if lang in COMMAND_LANGS:
            if pending is not None:
                raise DocError(f"{pending.where}: command block without an output block")
            unknown = set(rest) - FLAGS
            if unknown:
                raise DocError(f"{path}:{line}: unknown flags {sorted(unknown)}")
            pending = Block(path, line, set(rest), body)
        elif "output" in rest:
            if pending is None:
                raise DocError(f"{path}:{line}: output block without a command block")
            pending.expected, pending.expected_line = body, line
            blocks.append(pending)
            pending = None
    if pending is not None:
        raise DocError(f"{pending.where}: command block without an output block")
    return blocks


@dataclass
class Excerpt:
    path: str
    line: int
    source: str
    text: str

    @property
    def where(self):
        return f"{self.path}:{self.line}"


def parse_excerpts(path, text):
    """The blocks of one markdown file marked `excerpt=PATH`."""
    excerpts = []
    for line, words, body in fenced_blocks(path, text):
        for word in words:
            if word.startswith("excerpt="):
                source = word[len("excerpt="):]
                if not source:
                    raise DocError(f"{path}:{line}: excerpt= names no file")
                excerpts.append(Excerpt(path, line, source, body))
    return excerpts


def check_excerpt(excerpt):
    """None when the excerpt's lines stand in its file verbatim and in one piece; else what
    differs, as a diff against the part of the file that resembles it most."""
    source = Path(excerpt.path).parent / excerpt.source
    try:
        have = source.read_text(encoding="utf-8").split("\n")
    except OSError as error:
        raise DocError(f"{excerpt.where}: excerpt of {excerpt.source}: {error}") from error
    want = excerpt.text.split("\n")
    windows = [have[at:at + len(want)] for at in range(max(1, len(have) - len(want) + 1))]
    if want in windows:
        return None
    wanted = "\n".join(want)
    closest = max(windows, key=lambda window: difflib.SequenceMatcher(
        None, wanted, "\n".join(window), autojunk=False).ratio())
    diff = difflib.unified_diff(
        want, closest, f"excerpt ({excerpt.where})", f"{excerpt.source} (the most similar lines)",
        lineterm="",
    )
    return (f"\n{excerpt.where}: the excerpt is not in {excerpt.source} verbatim\n"
            + "\n".join(diff))


def normalize(text):
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return "".join(line + "\n" for line in lines)


JSON_DECIMAL = re.compile(r"(?<=[:\[,\s])(-?\d+)\.(\d+)(?=[,\]}\s])")


def canonical_numbers(text):
    def shorten(match):
        fraction = match.group(2).rstrip("0")
        return match.group(1) + ("." + fraction if fraction else "")

    return JSON_DECIMAL.sub(shorten, text)


def expected_pattern(expected):
    parts = []
    for line in normalize(expected).split("\n")[:-1]:
        if line.strip() == ELLIPSIS:
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append("[^\n]*?".join(map(re.escape, line.split(ELLIPSIS))) + "\n")
    return re.compile("".join(parts))


def output_matches(block, actual):
    expected, actual = normalize(block.expected), normalize(actual)
    if "jq" in block.text:
        expected, actual = canonical_numbers(expected), canonical_numbers(actual)
    return expected_pattern(expected).fullmatch(actual) is not None


def shown_expected(expected, actual):
    """The expected lines for a diff, each line with a `…` that matches a printed line (in
    order) shown as that line, so that the diff points at the lines that really differ."""
    printed = normalize(actual).splitlines()
    shown, at = [], 0
    for line in normalize(expected).splitlines():
        if ELLIPSIS in line and line.strip() != ELLIPSIS:
            pattern = re.compile("[^\n]*?".join(map(re.escape, line.split(ELLIPSIS))))
            found = next((i for i in range(at, len(printed)) if pattern.fullmatch(printed[i])), None)
            if found is not None:
                shown.append(printed[found])
                at = found + 1
                continue
        elif line in printed[at:]:
            at = printed.index(line, at) + 1
        shown.append(line)
    return shown


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def port_answers(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


class Addresses:
    """Documented address ↔ the address a run uses."""

    def __init__(self, blocks):
        ports = {8080}
        for block in blocks:
            ports.update(int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", block.text))
        ports.discard(PG_PORT)
        self.ports = {port: free_port() for port in sorted(ports)}
        self.databases = {}
        for block in blocks:
            for name in re.findall(r"^\s*createdb\b.*\s(\w+)\s*$", block.text, re.M):
                self.databases[name] = f"{name}_doccheck_{os.getpid()}_{secrets.token_hex(3)}"

    def to_run(self, text):
        text = re.sub(
            r"127\.0\.0\.1:(\d+)",
            lambda m: f"127.0.0.1:{self.ports.get(int(m.group(1)), m.group(1))}",
            text,
        )
        for doc, run in self.databases.items():
            text = re.sub(rf"(?<=:{PG_PORT}/){doc}\b", run, text)
            text = re.sub(rf"^(\s*createdb\b.*\s){doc}(\s*)$", rf"\g<1>{run}\g<2>", text, flags=re.M)
        return text

    def to_doc(self, text):
        for doc, run in self.ports.items():
            text = text.replace(f"127.0.0.1:{run}", f"127.0.0.1:{doc}")
        for doc, run in self.databases.items():
            text = text.replace(run, doc)
        return text

    def drop_databases(self, blocks):
        for block in blocks:
            for line in block.text.split("\n"):
                created = re.match(r"^\s*createdb\b(.*)\s(\w+)\s*$", line)
                if created and created.group(2) in self.databases:
                    run = self.databases[created.group(2)]
                    subprocess.run(
                        f"dropdb --if-exists --force{created.group(1)} {run}",
                        shell=True, check=False, timeout=60,
                    )


class Shell:
    """One bash session: blocks are sourced into it, so variables carry over."""

    def __init__(self, cwd, env):
        self.token = "__doc_check_" + secrets.token_hex(8)
        self.process = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True,
        )
        self.buffer = b""
        self.lock = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        while True:
            chunk = os.read(self.process.stdout.fileno(), 65536)
            with self.lock:
                if not chunk:
                    self.buffer += b"\0EOF"
                    self.lock.notify_all()
                    return
                self.buffer += chunk
                self.lock.notify_all()

    def run(self, script_path, timeout_s):
        """Sources a script (stdin from /dev/null); returns (output, exit status)."""
        marker = f"\n{self.token} "
        command = f"source '{script_path}' </dev/null; printf '\\n%s %s\\n' {self.token} \"$?\"\n"
        self.process.stdin.write(command.encode())
        self.process.stdin.flush()
        deadline = time.monotonic() + timeout_s
        with self.lock:
            while True:
                text = self.buffer.decode(errors="replace")
                at = text.find(marker)
                if at >= 0 and text.find("\n", at + len(marker)) >= 0:
                    end = text.find("\n", at + len(marker))
                    status = text[at + len(marker):end]
                    self.buffer = text[end + 1:].encode()
                    return text[:at], status
                if text.endswith("\0EOF"):
                    raise ShellLost(None, f"the shell ended:\n{text[:-4]}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no end after {timeout_s} s; printed so far:\n{text}")
                self.lock.wait(left)

    def close(self):
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()


@dataclass
class Server:
    block: Block
    port: int
    process: subprocess.Popen
    output_path: Path

    def stop(self):
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


class Run:
    def __init__(self, files, bin_path, postgres, block_timeout_s, server_timeout_s, show=False):
        self.files = files
        self.show = show
        self.bin_path = bin_path
        self.postgres = postgres
        self.block_timeout_s = block_timeout_s
        self.server_timeout_s = server_timeout_s
        self.failures = []

    def main(self):
        texts = {path: Path(path).read_text(encoding="utf-8") for path in self.files}
        parsed = [(path, parse(path, text)) for path, text in texts.items()]
        excerpts = [e for path, text in texts.items() for e in parse_excerpts(path, text)]
        for excerpt in excerpts:
            differs = check_excerpt(excerpt)
            print(f"[excerpt] {excerpt.where} ({excerpt.source}) {'FAILED' if differs else 'ok'}")
            if differs:
                self.failures.append(differs)
        every = [block for _, blocks in parsed for block in blocks]
        addresses = Addresses(every)
        scratch = Path(tempfile.mkdtemp(prefix="doc-check-"))
        try:
            if (ROOT / "examples").is_dir():
                shutil.copytree(ROOT / "examples", scratch / "examples")
            env = self.environment(scratch, addresses)
            total, number = len(every), 0
            for path, blocks in parsed:
                shell = Shell(scratch, env)
                servers, printed = [], []
                try:
                    for block in blocks:
                        number += 1
                        self.run_block(block, number, total, shell, servers, printed, addresses, scratch)
                except ShellLost as lost:
                    self.failures.append(f"\n{lost.block.where}: {lost}; the rest of {path} is not run")
                    print(f"[{number}/{total}] {lost.block.where} FAILED; the rest of {path} is not run")
                    number += sum(1 for b in blocks if b.line > lost.block.line)
                finally:
                    for server in servers:
                        server.stop()
                    shell.close()
        finally:
            if self.postgres == "yes":
                addresses.drop_databases([b for b in every if "postgres" in b.flags])
            shutil.rmtree(scratch, ignore_errors=True)
        for failure in self.failures:
            print(failure)
        checked = total + len(excerpts)
        print(f"doc-check: {checked - len(self.failures)} of {checked} blocks as documented "
              f"({total} command blocks, {len(excerpts)} "
              f"excerpt{'' if len(excerpts) == 1 else 's'})"
              + (f", {len(self.failures)} differ" if self.failures else ""))
        return 1 if self.failures else 0

    def environment(self, scratch, addresses):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHECKOUT_")}
        bin_dir = scratch / ".bin"
        bin_dir.mkdir()
        if self.bin_path:
            (bin_dir / "checkout-server").symlink_to(self.bin_path)
        env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
        env["CHECKOUT_LISTEN"] = f"127.0.0.1:{addresses.ports[8080]}"
        env.pop("RUST_LOG", None)
        return env

    def wants_postgres(self):
        if self.postgres == "auto":
            self.postgres = "yes" if port_answers(PG_PORT) else "no"
            if self.postgres == "no":
                print(f"doc-check: nothing answers on 127.0.0.1:{PG_PORT}; PostgreSQL blocks skipped")
        return self.postgres == "yes"

    def run_block(self, block, number, total, shell, servers, printed, addresses, scratch):
        label = f"[{number}/{total}] {block.where}"
        if "skip" in block.flags or ("postgres" in block.flags and not self.wants_postgres()):
            print(f"{label} skipped")
            return
        started = time.monotonic()
        try:
            text = addresses.to_run(self.resolve_pasted_lines(block, printed))
            script = scratch / ".blocks" / f"{number}.sh"
            script.parent.mkdir(exist_ok=True)
            script.write_text(text + "\n", encoding="utf-8")
            if "server" in block.flags:
                actual, status = self.start_server(block, script, shell, servers, addresses, scratch)
            else:
                actual, status = shell.run(script, self.block_timeout_s)
                actual, status = addresses.to_doc(actual), f"exit status {status}"
        except (TimeoutError, ShellLost) as error:
            raise ShellLost(block, str(error)) from error
        except (DocError, OSError) as error:
            self.failures.append(f"\n{block.where}: {error}")
            print(f"{label} FAILED")
            return
        printed.extend(line.strip() for line in actual.split("\n") if line.strip())
        elapsed = time.monotonic() - started
        matches = output_matches(block, actual)
        print(f"{label} {'ok' if matches else 'FAILED'} ({elapsed:.1f} s)")
        if self.show:
            print(textwrap.indent(normalize(actual), "    | ", lambda _: True), end="")
        if matches:
            return
        diff = difflib.unified_diff(
            shown_expected(block.expected, actual), normalize(actual).splitlines(),
            f"expected ({block.path}:{block.expected_line})", f"printed ({status})",
            lineterm="",
        )
        self.failures.append(f"\n{block.where}: the output differs from the docs\n" + "\n".join(diff))

    @staticmethod
    def resolve_pasted_lines(block, printed):
        lines = []
        for line in block.text.split("\n"):
            if ELLIPSIS in line:
                pattern = re.compile(".+?".join(map(re.escape, line.strip().split(ELLIPSIS))))
                found = next((p for p in reversed(printed) if pattern.fullmatch(p)), None)
                if found is None:
                    raise DocError(f"no line printed so far matches the line to paste {line.strip()!r}")
                line = line[: len(line) - len(line.lstrip())] + found
            lines.append(line)
        return "\n".join(lines)

    def start_server(self, block, script, shell, servers, addresses, scratch):
        doc_ports = [int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", block.text) if int(p) != PG_PORT]
        port = doc_ports[0] if doc_ports else 8080
        for earlier in [s for s in servers if s.port == port]:
            earlier.stop()
            servers.remove(earlier)
        # The server inherits what the reader's shell exports (CHECKOUT_DB, …) and its directory.
        env_file, cwd_file = scratch / ".blocks" / "env", scratch / ".blocks" / "cwd"
        dump = scratch / ".blocks" / "dump.sh"
        dump.write_text(f"env -0 > '{env_file}'; pwd > '{cwd_file}'\n", encoding="utf-8")
        shell.run(dump, self.block_timeout_s)
        env = dict(item.split("=", 1) for item in env_file.read_text().split("\0") if "=" in item)
        output_path = script.with_suffix(".out")
        with open(output_path, "wb") as output:
            process = subprocess.Popen(
                ["bash", "--noprofile", "--norc", str(script)], cwd=cwd_file.read_text().strip(),
                env=env, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        servers.append(Server(block, port, process, output_path))
        deadline = time.monotonic() + self.server_timeout_s
        while True:
            raw = output_path.read_text(errors="replace")
            actual = addresses.to_doc(raw)
            if raw.endswith("\n") and output_matches(block, actual):
                return actual, "the server runs"
            if process.poll() is not None:
                return actual, f"the server exited with status {process.returncode}"
            if time.monotonic() > deadline:
                return actual, f"the server printed no more within {self.server_timeout_s:.0f} s"
            time.sleep(0.1)


def build_binary():
    print("doc-check: cargo build --locked -p host-http --bin checkout-server", flush=True)
    built = subprocess.run(
        ["cargo", "build", "--locked", "-p", "host-http", "--bin", "checkout-server",
         "--message-format=json-render-diagnostics"],
        cwd=ROOT, stdout=subprocess.PIPE, check=True,
    )
    for line in built.stdout.decode().splitlines():
        message = json.loads(line)
        if message.get("reason") == "compiler-artifact" and message.get("executable") \
                and message["target"]["name"] == "checkout-server":
            return message["executable"]
    raise SystemExit("doc-check: cargo built no checkout-server executable")


SELF_TEST_DOC = """\
# Self-test

```sh
echo hello; X=41
```

```text output
hello
```

```sh server
printf '  TOKEN=%s\\n' "'abc-$RANDOM'"; echo "listening on 127.0.0.1:8080"; exec sleep 60
```

```text output
  TOKEN='abc-…'
listening on 127.0.0.1:8080
```

```sh
TOKEN='abc-…'
echo "token $TOKEN, x $((X + 1))"; printf '{"a":1.50}\\n' | jq -c .
```

```text output
token abc-…, x 42
{"a":1.5}
```

```sh
echo "x is $X"
echo done
```

```text output
x is 40
done
```

An excerpt as it stands in its file, and one that no longer does:

```python excerpt=excerpted.py
def verify(token):
    return token == "right"
```

```python excerpt=excerpted.py
def verify(token):
    return token == "wrong"
```
"""

SELF_TEST_EXCERPTED = """\
import sys


def verify(token):
    return token == "right"
"""


def self_test():
    """The checker accepts a right doc and rejects a wrong one, naming the block."""
    lines = SELF_TEST_DOC.split("\n")
    wrong_line = lines.index('echo "x is $X"')
    wrong_excerpt = len(lines) - lines[::-1].index("```python excerpt=excerpted.py")
    print(f"doc-check self-test: a doc whose block at line {wrong_line} and excerpt at line "
          f"{wrong_excerpt} are wrong")
    with tempfile.TemporaryDirectory(prefix="doc-check-self-test-") as scratch:
        doc = Path(scratch) / "doc.md"
        doc.write_text(SELF_TEST_DOC, encoding="utf-8")
        (Path(scratch) / "excerpted.py").write_text(SELF_TEST_EXCERPTED, encoding="utf-8")
        run = Run([str(doc)], None, "no", block_timeout_s=20, server_timeout_s=20)
        status = run.main()
        excerpt_failures = [f for f in run.failures if "excerpt" in f]
        block_failures = [f for f in run.failures if "the output differs" in f]
        ok = (status == 1 and len(run.failures) == 2
              and len(excerpt_failures) == 1 and len(block_failures) == 1
              and f"{doc}:{wrong_excerpt}: the excerpt is not in excerpted.py" in excerpt_failures[0]
              and '-    return token == "wrong"' in excerpt_failures[0]
              and '+    return token == "right"' in excerpt_failures[0]
              and f"{doc}:{wrong_line}: the output differs" in block_failures[0]
              and "-x is 40" in block_failures[0] and "+x is 41" in block_failures[0])
        try:
            parse("bad.md", "```sh\necho 1\n```\n\n```sh\necho 2\n```\n")
            ok = False
        except DocError as error:
            ok = ok and "bad.md:1: command block without an output block" in str(error)
    print("doc-check self-test:",
          "ok (the wrong block and the wrong excerpt, and only they, are reported)" if ok
          else "FAILED")
    return 0 if ok else 1


def main():
    parser = argparse.ArgumentParser(
        description="Run the shell examples of the docs and compare their output.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=textwrap.dedent(__doc__.split("\n\n", 2)[2]),
    )
    parser.add_argument("files", nargs="*", default=DEFAULT_FILES)
    parser.add_argument("--bin", help="checkout-server binary (default: cargo build -p host-http)")
    parser.add_argument("--postgres", choices=["auto", "yes", "no"], default="auto")
    parser.add_argument("--block-timeout", type=float, default=60, help="seconds per block")
    parser.add_argument("--server-timeout", type=float, default=60, help="seconds to start a server")
    parser.add_argument("--show", action="store_true", help="print what every block printed")
    parser.add_argument("--self-test", action="store_true", help="check the checker")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    files = [str(Path(f)) for f in args.files]
    os.chdir(ROOT)
    bin_path = str(Path(args.bin).resolve()) if args.bin else build_binary()
    if args.postgres == "yes" and not port_answers(PG_PORT):
        raise SystemExit(f"doc-check: --postgres yes, but nothing answers on 127.0.0.1:{PG_PORT}")
    try:
        return Run(files, bin_path, args.postgres, args.block_timeout, args.server_timeout,
                   args.show).main()
    except DocError as error:
        print(f"doc-check: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)
    sys.exit(main())
