"""tests/ci/prereqs.sh against a fake machine: a PATH of stub commands (id, apt-get, docker, python3, ...).

Nothing real is installed or called: every stub records its arguments, and the fake apt-get "installs" a
package by creating the stubs of the commands it provides.
"""

import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "tests" / "ci" / "prereqs.sh"

# The commands prereqs.sh looks for, by the package that provides them (Debian names).
PROVIDES = {
    "docker.io": ["docker", "dockerd"],
    "docker-cli": ["docker"],
    "debootstrap": ["debootstrap"],
    "openssh-client": ["ssh", "ssh-keygen"],
    "rsync": ["rsync"],
    "git": ["git"],
    "shellcheck": ["shellcheck"],
    "make": ["make"],
    "qemu-system-x86": ["qemu-system-x86_64"],
    "qemu-utils": ["qemu-img"],
    "nftables": ["nft"],
    "haproxy": ["haproxy"],
    "keepalived": ["keepalived"],
    "prometheus": ["promtool"],
    "prometheus-alertmanager": ["amtool"],
    "tcpdump": ["tcpdump"],
}
LAB = ["docker.io", "debootstrap", "openssh-client", "rsync"]
TEST_ONLY = ["git", "shellcheck", "make", "qemu-system-x86", "qemu-utils", "nftables", "haproxy", "keepalived", "prometheus",
             "prometheus-alertmanager", "tcpdump"]
APT_INSTALL = ["apt-get", "install", "-y", "-qq", "--no-install-recommends"]


class Machine:
    """A fake machine: a bin directory that is the script's whole PATH, and the calls its stubs saw."""

    def __init__(self, tmp_path):
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        self.calls = tmp_path / "calls"
        self.calls.touch()
        self.env = {"PATH": str(self.bin), "PREREQS_PATH": str(self.bin), "CALLS": str(self.calls),
                    "FAKE_BIN": str(self.bin), "FAKE_UID": "0", "FAKE_ENGINE": "0", "FAKE_ENSUREPIP": "0",
                    "FAKE_APT_PROVIDES": "", "FAKE_LISTS": str(tmp_path / "lists")}
        # Only the shell's builtins and absolute paths work inside the stubs: PATH holds the stubs alone.
        self.stub("id", 'echo "$FAKE_UID"')
        self.stub("python3", "exit $FAKE_ENSUREPIP")
        # `apt-get update` fills the package lists (FAKE_LISTS); `install` creates the stubs of FAKE_APT_PROVIDES.
        self.stub("apt-get",
                  'if [ "$1" = update ]; then : >"$FAKE_LISTS"; fi; '
                  'if [ "$1" = install ]; then for c in $FAKE_APT_PROVIDES; do '
                  'printf "#!/bin/sh\\nexit 0\\n" >"$FAKE_BIN/$c"; /bin/chmod +x "$FAKE_BIN/$c"; done; fi')

    def stub(self, name, body="exit 0"):
        path = self.bin / name
        path.write_text('#!/bin/sh\necho "%s $*" >>"$CALLS"\n%s\n' % (name, body))
        path.chmod(0o755)

    def provide(self, *packages):
        for package in packages:
            for command in PROVIDES[package]:
                self.stub(command, "exit $FAKE_ENGINE" if command == "docker" else "exit 0")

    def run(self, profile, **env):
        merged = dict(self.env, **env)
        return subprocess.run(["/bin/bash", str(SCRIPT), profile], env=merged, capture_output=True, text=True,
                              timeout=60, check=False)

    def apt_calls(self, options=False):
        """The apt-get calls, without their `-o NAME=VALUE` options unless `options`."""
        calls = [line.split() for line in self.calls.read_text().splitlines() if line.startswith("apt-get")]
        if options:
            return calls
        return [[word for i, word in enumerate(call) if word != "-o" and call[i - 1] != "-o"] for call in calls]

    def apt_busy(self, refusals, message="E: Could not get lock /var/lib/apt/lists/lock. It is held by process 42"):
        """apt-get refuses its first `refusals` runs with `message` (another apt run holds the lock), then works."""
        (self.bin.parent / "refusals").write_text(str(refusals))
        self.env["FAKE_REFUSALS"] = str(self.bin.parent / "refusals")
        self.env["FAKE_REFUSAL"] = message
        self.stub("sleep", "/bin/sleep 0.1")  # not the 5 s asked for
        self.stub("apt-get",
                  'read n <"$FAKE_REFUSALS"; if [ "$n" -gt 0 ]; then echo $((n - 1)) >"$FAKE_REFUSALS"; '
                  'echo "$FAKE_REFUSAL" >&2; exit 100; fi; '
                  'if [ "$1" = update ]; then : >"$FAKE_LISTS"; fi; '
                  'if [ "$1" = install ]; then for c in $FAKE_APT_PROVIDES; do '
                  'printf "#!/bin/sh\\nexit 0\\n" >"$FAKE_BIN/$c"; /bin/chmod +x "$FAKE_BIN/$c"; done; fi')


@pytest.fixture
def machine(tmp_path):
    return Machine(tmp_path)


@pytest.mark.parametrize("uid", ["0", "1000"])
@pytest.mark.parametrize("profile", ["venv", "lab", "test"])
def test_everything_present_means_no_apt_and_no_output(machine, profile, uid):
    machine.provide(*PROVIDES)
    result = machine.run(profile, FAKE_UID=uid)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert machine.apt_calls() == []


def test_missing_as_root_installs_exactly_the_missing_packages(machine):
    machine.provide("docker.io", "rsync")
    result = machine.run("lab", FAKE_APT_PROVIDES="debootstrap ssh ssh-keygen")
    assert result.returncode == 0, result.stderr
    assert machine.apt_calls() == [["apt-get", "update", "-qq"], APT_INSTALL + ["debootstrap", "openssh-client"]]
    assert "prereqs: installing debootstrap openssh-client" in result.stdout


def test_fresh_machine_as_root_gets_every_package_of_the_profile(machine):
    provided = " ".join(c for p in LAB + TEST_ONLY for c in PROVIDES[p])
    result = machine.run("test", FAKE_APT_PROVIDES=provided)
    assert result.returncode == 0, result.stderr
    assert machine.apt_calls()[-1] == APT_INSTALL + LAB + TEST_ONLY


def test_missing_as_non_root_stops_with_the_exact_command_and_installs_nothing(machine):
    machine.provide("openssh-client", "rsync")
    result = machine.run("lab", FAKE_UID="1000")
    assert result.returncode == 1
    assert "  sudo apt-get update && sudo apt-get install -y --no-install-recommends docker.io debootstrap\n" \
        in result.stderr
    assert machine.apt_calls() == []


def test_where_docker_cli_is_its_own_package_both_are_installed(machine):
    """Debian 13: the docker command is in docker-cli, which docker.io only recommends."""
    machine.stub("apt-cache", '[ "$2" = docker-cli ] && [ -e "$FAKE_LISTS" ]')
    machine.provide("debootstrap", "openssh-client", "rsync")
    # Empty package lists (a fresh machine): only the lists after `apt-get update` know docker-cli.
    result = machine.run("lab", FAKE_APT_PROVIDES="docker dockerd")
    assert result.returncode == 0, result.stderr
    assert machine.apt_calls() == [["apt-get", "update", "-qq"], APT_INSTALL + ["docker.io", "docker-cli"]]
    (machine.bin / "docker").unlink()
    result = machine.run("lab", FAKE_UID="1000")
    assert "--no-install-recommends docker-cli\n" in result.stderr


def test_missing_without_apt_get_names_the_packages(machine):
    (machine.bin / "apt-get").unlink()
    for uid in ("0", "1000"):
        result = machine.run("lab", FAKE_UID=uid)
        assert result.returncode == 1
        assert "docker.io debootstrap openssh-client rsync" in result.stderr
        assert "no apt-get here" in result.stderr


def test_python_without_ensurepip_needs_python3_venv(machine):
    machine.provide(*PROVIDES)
    result = machine.run("venv", FAKE_ENSUREPIP="1", FAKE_UID="1000")
    assert result.returncode == 1
    assert "sudo apt-get install -y --no-install-recommends python3-venv\n" in result.stderr


def test_the_lab_does_not_ask_for_the_test_tools(machine):
    machine.provide(*LAB)
    assert machine.run("lab", FAKE_UID="1000").returncode == 0
    result = machine.run("test", FAKE_UID="1000")
    assert result.returncode == 1
    assert "install -y --no-install-recommends " + " ".join(TEST_ONLY) + "\n" in result.stderr


def test_a_docker_cli_alone_will_do_while_an_engine_answers(machine):
    machine.provide(*LAB)
    (machine.bin / "dockerd").unlink()
    assert machine.run("lab", FAKE_UID="1000").returncode == 0
    result = machine.run("lab", FAKE_UID="1000", FAKE_ENGINE="1")
    assert result.returncode == 1
    assert "--no-install-recommends docker.io\n" in result.stderr


def test_a_package_that_does_not_provide_the_command_fails(machine):
    machine.provide("docker.io", "openssh-client", "rsync")
    result = machine.run("lab")
    assert result.returncode == 1
    assert "still missing after apt-get install: debootstrap" in result.stderr


def test_apt_waits_for_its_locks_and_retries_downloads(machine):
    """A fresh machine runs its own apt jobs at boot: every apt-get call waits for the lock (install itself does,
    through DPkg::Lock::Timeout) and retries downloads."""
    machine.provide("docker.io", "rsync", "openssh-client")
    result = machine.run("lab", FAKE_APT_PROVIDES="debootstrap", PREREQS_APT_LOCK_WAIT="77")
    assert result.returncode == 0, result.stderr
    calls = machine.apt_calls(options=True)
    assert [c[1] for c in calls] == ["update", "install"]
    for call in calls:
        assert "DPkg::Lock::Timeout=77" in call and "Acquire::Retries=3" in call, call


def test_an_update_refused_for_the_lists_lock_is_run_again(machine):
    """`apt-get update` ignores DPkg::Lock::Timeout for the lists lock: prereqs.sh runs it again until it gets it."""
    machine.provide("docker.io", "rsync", "openssh-client")
    machine.apt_busy(2)
    result = machine.run("lab", FAKE_APT_PROVIDES="debootstrap")
    assert result.returncode == 0, result.stderr
    assert [c[1] for c in machine.apt_calls()] == ["update", "update", "update", "install"]
    assert result.stdout.count("holds apt's lock; waiting for it") == 1, result.stdout
    assert "prereqs: installed debootstrap" in result.stdout


def test_a_lock_that_is_never_freed_fails_after_the_wait_with_apts_message(machine):
    machine.provide("docker.io", "rsync", "openssh-client")
    machine.apt_busy(1000, "E: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend)")
    result = machine.run("lab", PREREQS_APT_LOCK_WAIT="1")
    assert result.returncode == 100
    assert "Unable to acquire the dpkg frontend lock" in result.stderr
    assert "apt-get update: gave up after waiting 1s for apt's lock" in result.stderr
    assert 2 <= len(machine.apt_calls()) <= 30
    assert "install" not in machine.calls.read_text()


def test_any_other_apt_failure_ends_it_at_once(machine):
    machine.provide("docker.io", "rsync", "openssh-client")
    machine.apt_busy(1, "E: The repository 'http://deb.example/debian trixie Release' does not have a Release file.")
    result = machine.run("lab")
    assert result.returncode == 100
    assert "does not have a Release file" in result.stderr
    assert [c[1] for c in machine.apt_calls()] == ["update"]
    assert "sleep" not in machine.calls.read_text()


def test_an_unknown_profile_is_a_usage_error(machine):
    result = machine.run("everything")
    assert result.returncode == 2
    assert "usage" in result.stderr


def test_the_makefile_calls_it_before_the_venv_the_lab_and_the_tests():
    makefile = (ROOT / "Makefile").read_text()
    assert "prereqs.sh venv" in makefile
    for target in ("lab", "test"):
        assert any(line.startswith(target + ":") and "prereqs-" + target in line for line in makefile.splitlines())
