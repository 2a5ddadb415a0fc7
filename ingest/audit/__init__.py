"""The audit: reconcile loaded data with producers' monitoring events and report loss."""
