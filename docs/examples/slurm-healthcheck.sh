#!/bin/sh
# Slurm HealthCheckProgram and Prolog running fabricscope doctor (see docs/health-checks.md).
#
#   slurm.conf:  HealthCheckProgram=/usr/local/sbin/fabricscope-healthcheck
#                HealthCheckInterval=300
#                HealthCheckNodeState=ANY
#                Prolog=/usr/local/sbin/fabricscope-healthcheck     (optional: before every job too)
#
# In a prolog (slurmd sets SLURM_JOB_ID there) a failing verdict also exits 1, so the job
# does not start on the node: Slurm requeues it and drains the node ("Prolog error"; the
# script has set the doctor's reason first).
#
# slurmd runs it as root with an empty environment (only SLURMD_NODENAME), so every
# setting is read from the file below or has a default.  A failing verdict (exit 2 and
# a FAIL line) drains the node with the doctor's one-line reason, prefixed "fabricscope:";
# when the node is healthy again (exit 0 or 1), a node drained for a "fabricscope:" reason
# is resumed, and a node drained for any other reason is left alone.  When the doctor
# cannot complete (exit 3, the timeout) or refuses its arguments (exit 2 with an "error:"
# line and no verdict: a typo in the settings below, the same on every node) the node is
# left as it is and the reason goes to syslog: a check that cannot run says nothing
# about the node.
#
# /etc/default/fabricscope-healthcheck (optional, sh syntax):
#   FABRICSCOPE=/opt/fabricscope/bin/fabricscope   # the command, if not on PATH
#   FABRICSCOPE_DOCTOR_ARGS="--expect /etc/fabricscope/expect.toml"
#   FABRICSCOPE_HEALTHCHECK_TIMEOUT=60             # seconds before the check is given up
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
CONF=${FABRICSCOPE_HEALTHCHECK_CONF:-/etc/default/fabricscope-healthcheck}
# shellcheck disable=SC1090
[ -r "$CONF" ] && . "$CONF"
FABRICSCOPE=${FABRICSCOPE:-fabricscope}
TIMEOUT=${FABRICSCOPE_HEALTHCHECK_TIMEOUT:-60}
NODE=${SLURMD_NODENAME:-$(hostname -s)}

# The verdict is the one line on stdout (OK, WARN or FAIL first); what went to stderr is
# kept for syslog (an "error:" line says why there is no verdict).
# shellcheck disable=SC2086
out=$(timeout "$TIMEOUT" "$FABRICSCOPE" doctor --oneline $FABRICSCOPE_DOCTOR_ARGS 2>&1)
code=$?
line=$(printf '%s\n' "$out" | grep -E '^(OK|WARN|FAIL|UNKNOWN)[ :]' | tail -n 1)
reason=$(scontrol show node "$NODE" --oneliner 2>/dev/null | sed -n 's/.* Reason=\(.*\) \[[^]]*\].*/\1/p')

case $code:$line in
  2:FAIL*)
    if [ "$reason" != "fabricscope: $line" ]; then
      scontrol update nodename="$NODE" state=drain reason="fabricscope: $line"
    fi
    if [ -n "$SLURM_JOB_ID" ]; then
      echo "fabricscope: $line" >&2
      exit 1
    fi
    ;;
  0:* | 1:*)
    case $reason in
      fabricscope:*) scontrol update nodename="$NODE" state=resume ;;
    esac
    ;;
  *)
    why=${line:-$(printf '%s\n' "$out" | grep -m 1 '^error: ')}
    logger -t fabricscope-healthcheck "doctor could not complete on $NODE (exit $code): ${why:-no output}; node left as it is"
    ;;
esac
exit 0
