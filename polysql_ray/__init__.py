"""polysql_ray."""
