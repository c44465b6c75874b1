# Sourced by the Go build scripts (build-controlplane.sh, build-scheduler-plugin.sh); needs the caller's log().
#   timed NAME CMD...   run CMD under /usr/bin/time when available, log its wall time and the peak RSS of its
#                       largest process, and append "NAME wall_s peak_rss_kb" to $HRL_CP_TIMINGS when set
timed() {
  local name=$1; shift
  local t0; t0=$(date +%s)
  if [ -x /usr/bin/time ]; then
    local tf; tf=$(mktemp)
    /usr/bin/time -v -o "$tf" "$@"
    local rss; rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$tf")
    rm -f "$tf"
  else
    "$@"; local rss=""
  fi
  local wall=$(( $(date +%s) - t0 ))
  log "$name built in ${wall}s (peak RSS of one process: ${rss:-?} kB)"
  if [ -n "${HRL_CP_TIMINGS:-}" ]; then printf '%s\t%s\t%s\n' "$name" "$wall" "${rss:-}" >> "$HRL_CP_TIMINGS"; fi
}
