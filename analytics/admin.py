"""Analytics has no admin pages of its own.

Who may read analytics is edited on the team page (botadmin's `TeamMembershipInline`); API
tokens for scripts are issued under "Auth Token" (rest_framework.authtoken's own admin).
"""
