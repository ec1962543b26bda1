# Sourced by the comparison scripts: free_port prints a TCP port nobody listens on now (the
# kernel picks it), for an efabench rendezvous. A random port collided now and then with the
# ephemeral ports of the other tool's processes; then rank 0 could not listen and every other
# rank waited out its --timeout.
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
