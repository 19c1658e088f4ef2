from django.urls import URLPattern, URLResolver, path

from apps.billing import views

urlpatterns: list[URLPattern | URLResolver] = [
    path("budgets/", views.budgets_page, name="budgets"),
    path("finance/", views.finance_page, name="finance"),
    path("finance/ledger.csv", views.finance_ledger_csv, name="finance-ledger-csv"),
    path("finance/budgets/new/", views.finance_budget_create, name="finance-budget-create"),
    path("finance/budgets/<int:pk>/", views.finance_budget_save, name="finance-budget-save"),
    path("finance/quotas/new/", views.finance_quota_create, name="finance-quota-create"),
    path("finance/quotas/<int:pk>/", views.finance_quota_save, name="finance-quota-save"),
]
