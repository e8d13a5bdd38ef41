from __future__ import annotations

from allauth.socialaccount import views as social_views
from allauth.urls import build_provider_urlpatterns
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from triage.forms import ThrottledAuthenticationForm
from triage.views import agenda, reports, rotation, webhooks
from triage.views import console as views

login_view = auth_views.LoginView.as_view(authentication_form=ThrottledAuthenticationForm)

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", login_view, name="login"),
    # allauth's own pages link to its login page by this name: ours is the one.
    path("login/", login_view, name="account_login"),
    path("login/demo/", views.demo_login, name="demo-login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    # Sign in with GitHub: the provider's login and callback, and allauth's error pages. No
    # local sign-up, no e-mail flows: allauth's account URLs are left out on purpose.
    path("accounts/", include(build_provider_urlpatterns())),
    path(
        "accounts/login/cancelled/",
        social_views.login_cancelled,
        name="socialaccount_login_cancelled",
    ),
    path("accounts/login/error/", social_views.login_error, name="socialaccount_login_error"),
    path("accounts/signup/", social_views.signup, name="socialaccount_signup"),
    path("q/<slug:slug>/", views.inbox, name="inbox"),
    path("q/<slug:slug>/decided/", views.decided, name="decided"),
    path("q/<slug:slug>/bulk/", views.bulk_preview, name="bulk-preview"),
    path("q/<slug:slug>/bulk/accept/", views.bulk_accept, name="bulk-accept"),
    path("q/<slug:slug>/bulk/undo/", views.bulk_undo, name="bulk-undo"),
    path("q/<slug:slug>/sync/", views.start_sync, name="start-sync"),
    path("q/<slug:slug>/sync/status/", views.sync_status, name="sync-status"),
    path("p/<int:pk>/", views.proposal_detail, name="proposal"),
    path("p/<int:pk>/decide/", views.decide, name="decide"),
    path("p/<int:pk>/presence/", views.presence_ping, name="presence"),
    path("w/<int:pk>/", views.write_status, name="write-status"),
    path("w/<int:pk>/retry/", views.retry_write, name="retry-write"),
    path("w/<int:pk>/undo/", views.undo_write, name="undo-write"),
    path("i/<int:pk>/history/", views.history, name="history"),
    path("rubrics/<str:name>/", views.rubric_detail, name="rubric"),
    path("decisions.<str:fmt>", views.export_decisions, name="export-decisions"),
    # The weekly oncall rotation.
    path("rotation/<slug:slug>/", rotation.schedule, name="rotation"),
    path("rotation/<slug:slug>/assign/", rotation.assign, name="rotation-assign"),
    path("rotation/<slug:slug>/generate/", rotation.generate, name="rotation-generate"),
    path("rotation/<slug:slug>/swap/", rotation.swap, name="rotation-swap"),
    path("rotation/<slug:slug>/handoff/", rotation.handoff, name="rotation-handoff"),
    # The triage-review meeting.
    path("meetings/", agenda.meetings, name="meetings"),
    path("meetings/<str:day>/", agenda.meeting, name="meeting"),
    path("meetings/<str:day>/refresh/", agenda.refresh, name="meeting-refresh"),
    path("meetings/<str:day>/agenda.md", agenda.markdown, name="meeting-markdown"),
    path("meetings/<str:day>/items/<int:pk>/", agenda.outcome, name="agenda-outcome"),
    # Where humans disagree with the rubric.
    path("reports/<slug:slug>/", reports.report, name="report"),
    path("reports/<slug:slug>/decisions/", reports.decisions, name="report-decisions"),
    path("github/webhook/", webhooks.github_webhook, name="github-webhook"),
    path("admin/", admin.site.urls),
]
