"""What the staff pages ask of a staff member: Django's own permissions, as the admin asks them.
Being staff lets one into the admin; what one sees there and here is what one was granted (a
superuser has every permission)."""

from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.decorators import permission_required

# The audit page and the live view: every user's answers, as the admin's Generation list.
REVIEW_ANSWERS = "chatapp.view_generation"
# The live view's Stop of anyone's answer; asked together with REVIEW_ANSWERS, as a Stop is of
# an answer one sees there (alone, a Stop by id would tell of answers one may not review).
STOP_ANSWERS = "chatapp.stop_generation"


def may(user, *permissions: str) -> bool:
    return user.is_active and user.is_staff and user.has_perms(permissions)


def staff_page(permission: str):
    """A page for staff granted `permission`: others go to the admin's sign-in, as for any admin
    page; staff without it are refused (403)."""
    def decorate(view):
        return staff_member_required(permission_required(permission, raise_exception=True)(view))
    return decorate
