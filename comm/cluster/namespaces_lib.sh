# Shell tests' check that no network namespace outlives a job on emulated hosts (what
# namespaces_in_use.h does for the C++ tests). Source it, take `before=$(network_namespaces)`
# ahead of the job, and after it call `new_network_namespaces "$before"`: it prints the
# namespaces that exist now and did not then (another job's may have ended meanwhile, so only
# new ones count).

# Every network namespace a process is in or holds open. find fails for processes that end
# while it reads: not an error here.
network_namespaces() {
  { find /proc/[0-9]*/ns/net /proc/[0-9]*/fd -lname 'net:*' -printf '%l\n' 2>/dev/null || true; } |
    sort -u
}

new_network_namespaces() {
  comm -13 <(echo "$1") <(network_namespaces)
}
