"""``drakit node``: the daemon that runs discovery, publishing, the kubelet services and health."""
