"""Loading: settings, the plugin host (stevedore, pluggy), discovery, start-up."""
