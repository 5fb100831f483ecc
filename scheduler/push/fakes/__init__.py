"""Protocol-faithful local fakes of push providers (FCM, APNs) on one server framework.

:mod:`scheduler.push.fakes.server` is the framework (HTTP/1.1 + HTTP/2 on one port, TLS, faults,
counters); each provider's fake is an application on it.
"""
