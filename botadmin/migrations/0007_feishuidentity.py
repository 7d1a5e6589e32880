"""Feishu sign-in: which Feishu account (open_id / union_id of a tenant) is which user."""


import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('botadmin', '0006_managertoken'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='FeishuIdentity',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('tenant_key', models.CharField(max_length=64, verbose_name='tenant_key')),
                ('open_id', models.CharField(max_length=64, verbose_name='open_id')),
                ('union_id', models.CharField(blank=True, max_length=64, verbose_name='union_id')),
                ('name', models.CharField(blank=True, max_length=100, verbose_name='name in Feishu')),
                ('created_at', models.DateTimeField(auto_now_add=True, verbose_name='created at')),
                ('last_login_at', models.DateTimeField(blank=True, null=True, verbose_name='last sign-in')),
                ('bot', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='feishu_identities', to='botadmin.bot', verbose_name='bot')),
                ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='feishu_identities', to=settings.AUTH_USER_MODEL, verbose_name='user')),
            ],
            options={
                'verbose_name': 'Feishu account',
                'verbose_name_plural': 'Feishu accounts',
                'ordering': ['-last_login_at', '-created_at'],
                'indexes': [models.Index(fields=['tenant_key', 'union_id'], name='feishu_identity_union')],
                'constraints': [models.UniqueConstraint(fields=('bot', 'open_id'), name='feishu_identity_open_id')],
            },
        ),
    ]
