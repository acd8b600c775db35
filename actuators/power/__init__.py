"""Energy sources beside RAPL: the BMC (IPMI, Redfish) and a Prometheus query, behind one interface."""
