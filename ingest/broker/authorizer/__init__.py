"""Authorization as Kafka's ``AclAuthorizer``: the ACL model, its ZooKeeper store, every broker's cache."""
